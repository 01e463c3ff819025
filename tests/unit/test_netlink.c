/* net/netlink.c against the real kernel (needs root; 77 = skipped
 * otherwise): the private mode's routed pair, made as net/privnet.c makes
 * it: a veth from here into a network namespace a child makes, a /32 on
 * each end, links up, a host route to the sandbox and a default route via
 * the host's end, then a TCP connection from inside the namespace to a
 * listener on the host's address; the kernel's refusals come back named;
 * everything is removed. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/error.h"
#include "net/netlink.h"

static char host_if[16];
static struct sl_nl here = {.fd = -1}, there = {.fd = -1};
static pid_t holder = -1;
static int netns_fd = -1;

/* A child in a network namespace of its own, waiting to be killed. */
static int make_netns(void)
{
    int p[2];
    if (pipe(p) < 0)
        return -1;
    holder = fork();
    if (holder == 0) {
        char c = unshare(CLONE_NEWNET) == 0 ? 'y' : 'n';
        (void)!write(p[1], &c, 1);
        pause();
        _exit(0);
    }
    close(p[1]);
    char c = 0;
    (void)!read(p[0], &c, 1);
    close(p[0]);
    if (c != 'y')
        return -1;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)holder);
    return open(path, O_RDONLY | O_CLOEXEC);
}

static int setup(void **state)
{
    (void)state;
    snprintf(host_if, sizeof(host_if), "slt-h%05d", (int)(getpid() % 100000));
    netns_fd = make_netns();
    struct sl_error err = {0};
    if (netns_fd < 0 || sl_nl_open(&here, -1, &err) < 0 || sl_nl_open(&there, netns_fd, &err) < 0)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    struct sl_error err = {0};
    if (here.fd >= 0)
        sl_nl_link_del(&here, host_if, &err);
    sl_nl_close(&here);
    sl_nl_close(&there);
    if (holder > 0) {
        kill(holder, SIGKILL);
        waitpid(holder, NULL, 0);
    }
    if (netns_fd >= 0)
        close(netns_fd);
    return 0;
}

static uint32_t ip4(const char *text)
{
    struct in_addr a;
    assert_int_equal(inet_pton(AF_INET, text, &a), 1);
    return a.s_addr;
}

struct dial {
    uint16_t port;
    int rc, err;
};

/* Connect from inside the namespace (this thread only enters it). */
static void *dial_thread(void *arg)
{
    struct dial *d = arg;
    d->rc = -1;
    if (setns(netns_fd, CLONE_NEWNET) < 0) {
        d->err = errno;
        return NULL;
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(d->port),
                             .sin_addr.s_addr = ip4("10.209.0.1")};
    d->rc = connect(fd, (struct sockaddr *)&to, sizeof(to));
    d->err = errno;
    close(fd);
    return NULL;
}

static void a_routed_veth_pair_carries_a_connection(void **state)
{
    (void)state;
    struct sl_error err = {0};
    const uint32_t gw = ip4("10.209.0.1"), addr = ip4("10.209.0.2");
    /* eth0 at index 2: a new namespace has lo (1) only. */
    assert_int_equal(sl_nl_veth_add(&here, host_if, "eth0", netns_fd, 2, &err), 0);
    int host = sl_nl_ifindex(&here, host_if, &err);
    assert_true(host > 0);
    /* The peer is in the namespace, not here. */
    assert_int_equal((int)if_nametoindex(host_if), host);
    assert_int_equal(sl_nl_ifindex(&there, "eth0", &err), 2);
    assert_int_equal(sl_nl_addr4_add(&here, host, gw, 32, &err), 0);
    assert_int_equal(sl_nl_link_up(&here, host, &err), 0);
    assert_int_equal(sl_nl_route4_add(&here, addr, 32, host, 0, &err), 0);
    assert_int_equal(sl_nl_link_up(&there, 1, &err), 0);
    assert_int_equal(sl_nl_addr4_add(&there, 2, addr, 32, &err), 0);
    assert_int_equal(sl_nl_link_up(&there, 2, &err), 0);
    assert_int_equal(sl_nl_route4_add(&there, 0, 0, 2, gw, &err), 0);

    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in at = {.sin_family = AF_INET, .sin_addr.s_addr = ip4("10.209.0.1")};
    assert_int_equal(bind(l, (struct sockaddr *)&at, sizeof(at)), 0);
    socklen_t len = sizeof(at);
    assert_int_equal(getsockname(l, (struct sockaddr *)&at, &len), 0);
    assert_int_equal(listen(l, 4), 0);
    struct dial d = {.port = ntohs(at.sin_port)};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, dial_thread, &d), 0);
    pthread_join(t, NULL);
    if (d.rc != 0)
        fprintf(stderr, "connect from the namespace: %s\n", strerror(d.err));
    assert_int_equal(d.rc, 0);
    int c = accept(l, NULL, NULL);
    assert_true(c >= 0);
    close(c);
    close(l);
}

static void the_kernels_refusals_come_back_named(void **state)
{
    (void)state;
    struct sl_error err = {0};
    /* The same names and routes again: EEXIST, said. */
    assert_int_equal(sl_nl_veth_add(&here, host_if, "eth1", netns_fd, 0, &err), -1);
    assert_int_equal(err.errnum, EEXIST);
    assert_non_null(strstr(err.detail, "cannot create the veth pair"));
    sl_error_clear(&err);
    assert_int_equal(sl_nl_route4_add(&there, 0, 0, 2, ip4("10.209.0.1"), &err), -1);
    assert_int_equal(err.errnum, EEXIST);
    sl_error_clear(&err);
    /* Names the kernel could not take are refused before it is asked. */
    assert_int_equal(sl_nl_ifindex(&here, "a-name-far-too-long", &err), -1);
    assert_int_equal(err.errnum, EINVAL);
    sl_error_clear(&err);
    assert_int_equal(sl_nl_ifindex(&here, "slt-nothere", &err), -1);
    assert_int_equal(err.errnum, ENODEV);
    assert_non_null(strstr(err.detail, "slt-nothere"));
    sl_error_clear(&err);
    assert_int_equal(sl_nl_addr4_add(&here, 1, ip4("10.209.0.9"), 33, &err), -1);
    sl_error_clear(&err);
    /* Removing what is not there is fine; removing the host end takes the
     * peer with it. */
    assert_int_equal(sl_nl_link_del(&here, "slt-nothere", &err), 0);
    assert_int_equal(sl_nl_link_del(&here, host_if, &err), 0);
    assert_int_equal(sl_nl_ifindex(&there, "eth0", &err), -1);
    assert_int_equal(err.errnum, ENODEV);
}

int main(void)
{
    if (geteuid() != 0) {
        fprintf(stderr, "test_netlink needs root: skipped\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_routed_veth_pair_carries_a_connection),
        cmocka_unit_test(the_kernels_refusals_come_back_named),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
