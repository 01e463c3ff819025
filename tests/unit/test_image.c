/* workspace/image.c: finding what is mounted at a root in mountinfo, which
 * decides whether a start adopts a previous run's mounts or refuses. */
/* cmocka needs these first. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <string.h>

#include "workspace/image.h"

/* Two lines for one mount point (the second mounted on top), optional
 * fields, and an escaped space in a path. */
static const char MOUNTINFO[] =
    "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda1 rw\n"
    "46 22 0:40 /sandboxes /var/lib/sl/sandboxes rw,nosuid - btrfs /dev/loop3 rw,subvol=/a\n"
    "47 46 0:41 / /var/lib/sl/sandboxes rw shared:7 master:2 - tmpfs tmpfs rw\n"
    "48 22 0:42 /templates /srv/my\\040state/templates rw - btrfs /dev/loop\\0405 rw\n";

static void topmost_mount_wins(void **state)
{
    (void)state;
    char src[64];
    assert_int_equal(
        ws_mountinfo_source(MOUNTINFO, "/var/lib/sl/sandboxes", src, sizeof(src), NULL, 0), 1);
    assert_string_equal(src, "tmpfs");
    assert_int_equal(ws_mountinfo_source(MOUNTINFO, "/", src, sizeof(src), NULL, 0), 1);
    assert_string_equal(src, "/dev/vda1");
}

static void the_mounted_part_is_read_too(void **state)
{
    (void)state;
    char src[64], root[64];
    assert_int_equal(ws_mountinfo_source(MOUNTINFO, "/srv/my state/templates", src, sizeof(src),
                                         root, sizeof(root)),
                     1);
    assert_string_equal(root, "/templates");
    /* The topmost mount's: the tmpfs over the image's subvolume. */
    assert_int_equal(ws_mountinfo_source(MOUNTINFO, "/var/lib/sl/sandboxes", src, sizeof(src), root,
                                         sizeof(root)),
                     1);
    assert_string_equal(root, "/");
}

static void escapes_are_undone(void **state)
{
    (void)state;
    char src[64];
    assert_int_equal(
        ws_mountinfo_source(MOUNTINFO, "/srv/my state/templates", src, sizeof(src), NULL, 0), 1);
    assert_string_equal(src, "/dev/loop 5");
    assert_int_equal(
        ws_mountinfo_source(MOUNTINFO, "/srv/my\\040state/templates", src, sizeof(src), NULL, 0),
        0);
}

static void absent_and_malformed(void **state)
{
    (void)state;
    char src[64];
    assert_int_equal(ws_mountinfo_source(MOUNTINFO, "/var/lib/sl", src, sizeof(src), NULL, 0), 0);
    assert_int_equal(ws_mountinfo_source("", "/", src, sizeof(src), NULL, 0), 0);
    /* No " - " separator on the matching line. */
    assert_int_equal(
        ws_mountinfo_source("1 0 0:1 / /x rw ext4 /dev/a rw\n", "/x", src, sizeof(src), NULL, 0),
        -1);
    /* A source longer than the buffer. */
    char tiny[4];
    assert_int_equal(ws_mountinfo_source(MOUNTINFO, "/", tiny, sizeof(tiny), NULL, 0), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(topmost_mount_wins),
        cmocka_unit_test(escapes_are_undone),
        cmocka_unit_test(the_mounted_part_is_read_too),
        cmocka_unit_test(absent_and_malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
