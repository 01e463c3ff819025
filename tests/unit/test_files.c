/* Safe File API operations (API.md §5), their locks, and the strict base64
 * codec. Each test gets a fresh sandbox root under a temporary directory,
 * laid out as RUNTIME.md §9 describes, next to an "outside" directory that
 * no call may ever touch. As root the sandbox uid is 23456; otherwise the
 * caller's own uid, so that the ownership checks still mean something. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/base64.h"
#include "common/util.h"
#include "workspace/files.h"

#define MSG_NUL "file path may not contain .. or NUL"
#define MSG_NO_SUCH "path does not exist"
#define MSG_NOT_DIR "path is not a directory or traverses a symlink"
#define MSG_SYMLINK "file path may not traverse symlinks"
#define MSG_EXISTS "path already exists"
#define MSG_NOT_EMPTY "directory is not empty or is busy"
#define MSG_NO_PARENT "parent directory does not exist"
#define MSG_NO_SRC_PARENT "source parent directory does not exist"
#define MSG_NO_DST_PARENT "destination parent directory does not exist"
#define MSG_NOT_REGULAR "path is not a regular file"
#define MSG_TOO_LARGE "file exceeds the sandbox File API size limit"
#define MSG_ROOT_WRITE "cannot write the workspace root"
#define MSG_ROOT_MKDIR "cannot create the workspace root"
#define MSG_ROOT_DELETE "cannot delete the workspace root"
#define MSG_ROOT_MOVE "cannot move the workspace root"
#define MSG_NO_SRC "source path does not exist"
#define MSG_DST_EXISTS "destination already exists"
#define MSG_OVERLAP "cannot move overlapping directories"
#define MSG_B64 "content_base64 is not valid base64"

struct fx {
    char base[32];
    char root[64];
    char ws[96];
    char outside[64];
    int root_fd;
    uid_t uid;
    struct sl_ws_target t;
};

/* ---- helpers ---- */

#define P(s) (s), strlen(s)

#define EXPECT_OK(expr)                                                                            \
    do {                                                                                           \
        sl_error_clear(&err);                                                                      \
        if ((expr) != 0)                                                                           \
            fail_msg("%s failed: %s [%s]", #expr, err.message, err.detail);                        \
    } while (0)

#define EXPECT_REFUSED(expr, msg)                                                                  \
    do {                                                                                           \
        sl_error_clear(&err);                                                                      \
        int rc_ = (expr);                                                                          \
        if (rc_ != -1)                                                                             \
            fail_msg("%s succeeded, expected '%s'", #expr, (msg));                                 \
        if (!err.code || strcmp(err.code, SL_E_INVALID_ARGUMENT) != 0 ||                           \
            strcmp(err.message, (msg)) != 0)                                                       \
            fail_msg("%s: got %s '%s' [%s], expected '%s'", #expr, err.code ? err.code : "(null)", \
                     err.message, err.detail, (msg));                                              \
    } while (0)

#define EXPECT_LOCKED(expr)                                                                        \
    do {                                                                                           \
        sl_error_clear(&err);                                                                      \
        int rc_ = (expr);                                                                          \
        assert_int_equal(rc_, -1);                                                                 \
        assert_non_null(err.code);                                                                 \
        assert_string_equal(err.code, SL_E_FILE_PATH_LOCKED);                                      \
        assert_string_equal(err.message, "SANDBOX_FILE_PATH_LOCKED");                              \
    } while (0)

/* Host path of a workspace-relative name (rotating static buffers). */
static const char *H(const struct fx *f, const char *rel)
{
    static char bufs[8][PATH_MAX];
    static unsigned i;
    char *b = bufs[i++ % 8];
    snprintf(b, PATH_MAX, "%s/%s", f->ws, rel);
    return b;
}

static const char *O(const struct fx *f, const char *rel)
{
    static char bufs[4][PATH_MAX];
    static unsigned i;
    char *b = bufs[i++ % 4];
    snprintf(b, PATH_MAX, "%s/%s", f->outside, rel);
    return b;
}

static void put_host(const char *path, const char *content, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    assert_true(fd >= 0);
    size_t len = strlen(content);
    assert_int_equal(write(fd, content, len), (ssize_t)len);
    assert_int_equal(fchmod(fd, mode), 0);
    close(fd);
}

static char *slurp_host(const char *path)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return NULL;
    char *buf = calloc(1, 1 << 16);
    size_t n = fread(buf, 1, (1 << 16) - 1, fp);
    buf[n] = '\0';
    fclose(fp);
    return buf;
}

static void assert_host_content(const char *path, const char *want)
{
    char *got = slurp_host(path);
    assert_non_null(got);
    assert_string_equal(got, want);
    free(got);
}

static bool host_exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

static void assert_owned(const struct fx *f, const char *path, mode_t mode)
{
    struct stat st;
    assert_int_equal(lstat(path, &st), 0);
    assert_int_equal(st.st_uid, f->uid);
    assert_int_equal(st.st_gid, (gid_t)f->uid);
    assert_int_equal(st.st_mode & 07777, mode);
}

/* No ".sandbox-write-*" temporary left behind in a host directory. */
static void assert_no_temp(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *de;
    while ((de = readdir(d)))
        if (strncmp(de->d_name, ".sandbox-", 9) == 0)
            fail_msg("temporary %s left in %s", de->d_name, dir);
    closedir(d);
}

static int rm_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    return flag == FTW_DP ? rmdir(path) : unlink(path);
}

/* Pre-order pass so the removal can enter directories a test made 0000. */
static int chmod_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)ftw;
    if (flag == FTW_D || flag == FTW_DNR)
        chmod(path, (st->st_mode & 07777) | 0700);
    return 0;
}

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    snprintf(f->base, sizeof(f->base), "/tmp/sl-files-XXXXXX");
    if (!mkdtemp(f->base))
        return -1;
    f->uid = geteuid() == 0 ? 23456 : geteuid();
    snprintf(f->root, sizeof(f->root), "%s/sbx", f->base);
    snprintf(f->ws, sizeof(f->ws), "%s/workspace", f->root);
    snprintf(f->outside, sizeof(f->outside), "%s/outside", f->base);
    if (mkdir(f->root, 0700) < 0 || mkdir(f->outside, 0700) < 0)
        return -1;
    static const char *const subdirs[] = {"workspace", "home",        "cache",      "envs",
                                          "logs",      ".exec-locks", ".file-locks"};
    for (size_t i = 0; i < sizeof(subdirs) / sizeof(subdirs[0]); i++) {
        char p[PATH_MAX];
        snprintf(p, sizeof(p), "%s/%s", f->root, subdirs[i]);
        if (mkdir(p, 0700) < 0)
            return -1;
        if (subdirs[i][0] != '.' && chown(p, f->uid, f->uid) < 0)
            return -1;
    }
    f->root_fd = open(f->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (f->root_fd < 0)
        return -1;
    f->t = (struct sl_ws_target){.root_fd = f->root_fd, .uid = f->uid, .max_file_bytes = 1 << 20};
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    close(f->root_fd);
    nftw(f->base, chmod_cb, 64, FTW_PHYS);
    nftw(f->base, rm_cb, 64, FTW_DEPTH | FTW_PHYS);
    free(f);
    return 0;
}

/* ---- write / read ---- */

static void test_write_read_roundtrip(void **state)
{
    struct fx *f = *state;
    struct sl_error err;
    unsigned char data[512];
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (unsigned char)(i * 7);
    /* A root that is not yet the sandbox's: write must fix the whole chain. */
    assert_int_equal(chmod(f->ws, 0755), 0);

    EXPECT_OK(ws_file_write(&f->t, P("/workspace/d1/d2/bin.dat"), data, sizeof(data), &err));
    assert_owned(f, H(f, "d1/d2/bin.dat"), 0600);
    assert_owned(f, H(f, "d1/d2"), 0700);
    assert_owned(f, H(f, "d1"), 0700);
    assert_owned(f, f->ws, 0700);
    assert_no_temp(H(f, "d1/d2"));

    struct sl_buf out;
    EXPECT_OK(ws_file_read(&f->t, P("d1/d2/bin.dat"), &out, &err));
    assert_int_equal(out.len, sizeof(data));
    assert_memory_equal(out.data, data, sizeof(data));
    sl_buf_free(&out);

    /* Empty content is a valid file. */
    EXPECT_OK(ws_file_write(&f->t, P("empty"), NULL, 0, &err));
    EXPECT_OK(ws_file_read(&f->t, P("/workspace/empty/"), &out, &err));
    assert_int_equal(out.len, 0);
    sl_buf_free(&out);

    /* Every path is inside the workspace. */
    EXPECT_OK(ws_file_write(&f->t, P("/etc/passwd"), "x", 1, &err));
    assert_host_content(H(f, "etc/passwd"), "x");
}

static void test_write_existing_chain_fixed(void **state)
{
    struct fx *f = *state;
    struct sl_error err;
    assert_int_equal(mkdir(H(f, "old"), 0755), 0); /* root-owned, 0755 */
    EXPECT_OK(ws_file_write(&f->t, P("old/f"), "1", 1, &err));
    assert_owned(f, H(f, "old"), 0700);
}

static void test_write_overwrite_mode(void **state)
{
    struct fx *f = *state;
    struct sl_error err;
    put_host(H(f, "conf.txt"), "old content", 0644);
    EXPECT_OK(ws_file_write(&f->t, P("conf.txt"), "new", 3, &err));
    assert_owned(f, H(f, "conf.txt"), 0600);
    assert_host_content(H(f, "conf.txt"), "new");
    assert_no_temp(f->ws);
}

static void test_write_refusals(void **state)
{
    struct fx *f = *state;
    struct sl_error err;
    EXPECT_REFUSED(ws_file_write(&f->t, P("/workspace"), "x", 1, &err), MSG_ROOT_WRITE);
    EXPECT_REFUSED(ws_file_write(&f->t, P("/"), "x", 1, &err), MSG_ROOT_WRITE);
    EXPECT_REFUSED(ws_file_write(&f->t, P(""), "x", 1, &err), MSG_ROOT_WRITE);
    EXPECT_REFUSED(ws_file_write(&f->t, P("a/../b"), "x", 1, &err), MSG_NUL);
    EXPECT_REFUSED(ws_file_write(&f->t, "a\0b", 3, "x", 1, &err), MSG_NUL);

    assert_int_equal(mkdir(H(f, "dir"), 0700), 0);
    EXPECT_REFUSED(ws_file_write(&f->t, P("dir"), "x", 1, &err), MSG_NOT_REGULAR);
    assert_int_equal(mkfifo(H(f, "fifo"), 0600), 0);
    EXPECT_REFUSED(ws_file_write(&f->t, P("fifo"), "x", 1, &err), MSG_NOT_REGULAR);
    assert_no_temp(f->ws);

    /* A file where a directory is needed. */
    put_host(H(f, "plain"), "p", 0600);
    EXPECT_REFUSED(ws_file_write(&f->t, P("plain/x"), "x", 1, &err), MSG_NOT_DIR);

    f->t.max_file_bytes = 4;
    EXPECT_REFUSED(ws_file_write(&f->t, P("big"), "12345", 5, &err), MSG_TOO_LARGE);
    EXPECT_OK(ws_file_write(&f->t, P("fits"), "1234", 4, &err));
    assert_false(host_exists(H(f, "big")));
}

static void test_symlink_directory_component(void **state)
{
    struct fx *f = *state;
    struct sl_error err;
    struct sl_buf out;
    assert_int_equal(symlink(f->outside, H(f, "out")), 0);
    assert_int_equal(mkdir(H(f, "real"), 0700), 0);
    put_host(H(f, "real/file"), "inside", 0600);
    put_host(O(f, "file"), "outside", 0600);
    /* Relative and absolute links that stay inside the workspace. */
    assert_int_equal(symlink("real", H(f, "in_rel")), 0);
    assert_int_equal(symlink(H(f, "real"), H(f, "in_abs")), 0);

    const char *links[] = {"out", "in_rel", "in_abs"};
    for (size_t i = 0; i < 3; i++) {
        char p[64], deep[64];
        snprintf(p, sizeof(p), "%s/file", links[i]);
        snprintf(deep, sizeof(deep), "%s/new/x", links[i]);
        EXPECT_REFUSED(ws_file_write(&f->t, P(p), "pwned", 5, &err), MSG_SYMLINK);
        EXPECT_REFUSED(ws_file_write(&f->t, P(deep), "pwned", 5, &err), MSG_SYMLINK);
        EXPECT_REFUSED(ws_file_read(&f->t, P(p), &out, &err), MSG_SYMLINK);
        EXPECT_REFUSED(ws_file_delete(&f->t, P(p), false, &err), MSG_SYMLINK);
        EXPECT_REFUSED(ws_file_mkdir(&f->t, P(deep), true, &err), MSG_NOT_DIR);
        struct sl_ws_listing l;
        EXPECT_REFUSED(ws_file_list(&f->t, P(links[i]), 10, 0, &l, &err), MSG_NOT_DIR);
        EXPECT_REFUSED(ws_file_move(&f->t, P(p), P("moved"), false, &err), MSG_SYMLINK);
        EXPECT_REFUSED(ws_file_move(&f->t, P("real/file"), P(p), true, &err), MSG_SYMLINK);
    }
    assert_host_content(O(f, "file"), "outside");
    assert_host_content(H(f, "real/file"), "inside");
    assert_false(host_exists(O(f, "new")));
    assert_false(host_exists(H(f, "real/new")));
}

static void test_final_symlink(void **state)
{
    struct fx *f = *state;
    struct sl_error err;
    struct sl_buf out;
    put_host(O(f, "secret"), "secret", 0600);
    assert_int_equal(symlink(O(f, "secret"), H(f, "link")), 0);

    EXPECT_REFUSED(ws_file_read(&f->t, P("link"), &out, &err), MSG_SYMLINK);
    EXPECT_REFUSED(ws_file_write(&f->t, P("link"), "pwned", 5, &err), MSG_NOT_REGULAR);
    assert_host_content(O(f, "secret"), "secret");

    struct sl_ws_listing l;
    EXPECT_OK(ws_file_list(&f->t, P("/"), 10, 0, &l, &err));
    assert_int_equal(l.n, 1);
    assert_string_equal(l.entries[0].name, "link");
    assert_string_equal(l.entries[0].type, "symlink");
    assert_int_equal(l.entries[0].size_bytes, (int64_t)strlen(O(f, "secret")));
    sl_ws_listing_free(&l);

    EXPECT_OK(ws_file_delete(&f->t, P("link"), false, &err));
    assert_false(host_exists(H(f, "link")));
    assert_host_content(O(f, "secret"), "secret");

    /* A link to a directory is removed as a link, even recursively. */
    assert_int_equal(symlink(f->outside, H(f, "dirlink")), 0);
    EXPECT_OK(ws_file_delete(&f->t, P("dirlink"), true, &err));
    assert_false(host_exists(H(f, "dirlink")));
    assert_host_content(O(f, "secret"), "secret");
}

static void test_read_refusals(void **state)
{
    struct fx *f = *state;
    struct sl_error err;
    struct sl_buf out;
    f->t.max_file_bytes = 8;
    put_host(H(f, "nine"), "123456789", 0600);
    put_host(H(f, "eight"), "12345678", 0600);
    EXPECT_REFUSED(ws_file_read(&f->t, P("nine"), &out, &err), MSG_TOO_LARGE);
    assert_null(out.data);
    EXPECT_OK(ws_file_read(&f->t, P("eight"), &out, &err));
    assert_int_equal(out.len, 8);
    assert_string_equal(out.data, "12345678");
    sl_buf_free(&out);

    EXPECT_REFUSED(ws_file_read(&f->t, P("/workspace"), &out, &err), MSG_NOT_REGULAR);
    EXPECT_REFUSED(ws_file_read(&f->t, P("missing"), &out, &err), MSG_NO_SUCH);
    EXPECT_REFUSED(ws_file_read(&f->t, P("nodir/missing"), &out, &err), MSG_NO_SUCH);
    EXPECT_REFUSED(ws_file_read(&f->t, P("eight/x"), &out, &err), MSG_NOT_DIR);
    assert_int_equal(mkdir(H(f, "dir"), 0700), 0);
    EXPECT_REFUSED(ws_file_read(&f->t, P("dir"), &out, &err), MSG_NOT_REGULAR);
    /* A FIFO is refused without being opened (no writer: would block). */
    assert_int_equal(mkfifo(H(f, "fifo"), 0600), 0);
    EXPECT_REFUSED(ws_file_read(&f->t, P("fifo"), &out, &err), MSG_NOT_REGULAR);
    EXPECT_REFUSED(ws_file_read(&f->t, P("../x"), &out, &err), MSG_NUL);
}

/* ---- list ---- */

static void test_list(void **state)
{
    struct fx *f = *state;
    struct sl_error err;
    struct sl_ws_listing l;
    put_host(H(f, "b"), "bb", 0600);
    put_host(H(f, "a"), "a", 0640);
    put_host(H(f, "C"), "", 0600);
    put_host(H(f, ".hidden"), "h", 0600);
    assert_int_equal(mkdir(H(f, "dir"), 0750), 0);
    assert_int_equal(chmod(H(f, "dir"), 0750), 0);
    put_host(H(f, "dir/inner"), "i", 0600);
    assert_int_equal(mkfifo(H(f, "pipe"), 0600), 0);
    struct timespec ts[2] = {{1767225600, 500000000}, {1767225600, 500000000}};
    assert_int_equal(utimensat(AT_FDCWD, H(f, "a"), ts, AT_SYMLINK_NOFOLLOW), 0);

    /* Byte order: '.' < 'C' < 'a' < 'b' < 'd' < 'p'. */
    static const char *const sorted[] = {".hidden", "C", "a", "b", "dir", "pipe"};
    EXPECT_OK(ws_file_list(&f->t, P("/workspace"), 100, 0, &l, &err));
    assert_int_equal(l.total, 6);
    assert_false(l.has_more);
    assert_int_equal(l.n, 6);
    for (size_t i = 0; i < 6; i++)
        assert_string_equal(l.entries[i].name, sorted[i]);
    const struct sl_ws_entry *a = &l.entries[2];
    assert_string_equal(a->path, "/workspace/a");
    assert_string_equal(a->type, "file");
    assert_int_equal(a->size_bytes, 1);
    assert_int_equal(a->mode, 0640);
    assert_true(a->modified_at > 1767225600.49 && a->modified_at < 1767225600.51);
    assert_string_equal(l.entries[4].type, "directory");
    assert_int_equal(l.entries[4].mode, 0750);
    assert_string_equal(l.entries[5].type, "file"); /* FIFO reported as a file */
    sl_ws_listing_free(&l);

    EXPECT_OK(ws_file_list(&f->t, P(""), 2, 0, &l, &err));
    assert_int_equal(l.n, 2);
    assert_int_equal(l.total, 6);
    assert_true(l.has_more);
    assert_string_equal(l.entries[0].name, ".hidden");
    assert_string_equal(l.entries[1].name, "C");
    sl_ws_listing_free(&l);

    EXPECT_OK(ws_file_list(&f->t, P("/"), 2, 4, &l, &err));
    assert_int_equal(l.n, 2);
    assert_false(l.has_more); /* 4 + 2 < 6 is false */
    assert_string_equal(l.entries[0].name, "dir");
    sl_ws_listing_free(&l);

    EXPECT_OK(ws_file_list(&f->t, P("/"), 2, 3, &l, &err));
    assert_int_equal(l.n, 2);
    assert_true(l.has_more);
    assert_string_equal(l.entries[0].name, "b");
    sl_ws_listing_free(&l);

    EXPECT_OK(ws_file_list(&f->t, P("/"), 5, 10, &l, &err));
    assert_int_equal(l.n, 0);
    assert_int_equal(l.total, 6);
    assert_false(l.has_more);
    sl_ws_listing_free(&l);

    EXPECT_OK(ws_file_list(&f->t, P("/workspace/dir/"), 10, 0, &l, &err));
    assert_int_equal(l.n, 1);
    assert_string_equal(l.entries[0].path, "/workspace/dir/inner");
    sl_ws_listing_free(&l);

    EXPECT_OK(ws_file_list(&f->t, P("./dir/."), 10, 0, &l, &err));
    assert_int_equal(l.n, 1);
    sl_ws_listing_free(&l);

    EXPECT_REFUSED(ws_file_list(&f->t, P("a"), 10, 0, &l, &err), MSG_NOT_DIR);
    EXPECT_REFUSED(ws_file_list(&f->t, P("pipe"), 10, 0, &l, &err), MSG_NOT_DIR);
    EXPECT_REFUSED(ws_file_list(&f->t, P("missing"), 10, 0, &l, &err), MSG_NO_SUCH);
    EXPECT_REFUSED(ws_file_list(&f->t, P("a/.."), 10, 0, &l, &err), MSG_NUL);
}

static void test_list_empty(void **state)
{
    struct fx *f = *state;
    struct sl_error err;
    struct sl_ws_listing l;
    EXPECT_OK(ws_file_list(&f->t, P("/workspace"), 1, 0, &l, &err));
    assert_int_equal(l.n, 0);
    assert_int_equal(l.total, 0);
    assert_false(l.has_more);
    sl_ws_listing_free(&l);
}

/* ---- mkdir ---- */

static void test_mkdir(void **state)
{
    struct fx *f = *state;
    struct sl_error err;
    EXPECT_REFUSED(ws_file_mkdir(&f->t, P("/workspace/"), false, &err), MSG_ROOT_MKDIR);
    EXPECT_REFUSED(ws_file_mkdir(&f->t, P("/"), true, &err), MSG_ROOT_MKDIR);
    EXPECT_REFUSED(ws_file_mkdir(&f->t, P("x/y"), false, &err), MSG_NO_PARENT);
    assert_false(host_exists(H(f, "x")));

    assert_int_equal(chmod(f->ws, 0755), 0);
    EXPECT_OK(ws_file_mkdir(&f->t, P("a"), false, &err));
    assert_owned(f, H(f, "a"), 0700);
    assert_owned(f, f->ws, 0700);
    EXPECT_REFUSED(ws_file_mkdir(&f->t, P("a"), false, &err), MSG_EXISTS);
    EXPECT_OK(ws_file_mkdir(&f->t, P("a"), true, &err));

    EXPECT_OK(ws_file_mkdir(&f->t, P("/workspace/p/q/r/"), true, &err));
    assert_owned(f, H(f, "p"), 0700);
    assert_owned(f, H(f, "p/q"), 0700);
    assert_owned(f, H(f, "p/q/r"), 0700);

    /* An existing directory is handed to the sandbox too. */
    assert_int_equal(mkdir(H(f, "legacy"), 0755), 0);
    EXPECT_OK(ws_file_mkdir(&f->t, P("legacy"), true, &err));
    assert_owned(f, H(f, "legacy"), 0700);

    put_host(H(f, "file"), "f", 0600);
    EXPECT_REFUSED(ws_file_mkdir(&f->t, P("file"), false, &err), MSG_EXISTS);
    EXPECT_REFUSED(ws_file_mkdir(&f->t, P("file"), true, &err), MSG_NOT_DIR);
    EXPECT_REFUSED(ws_file_mkdir(&f->t, P("file/sub"), true, &err), MSG_NOT_DIR);
    EXPECT_REFUSED(ws_file_mkdir(&f->t, P("file/sub"), false, &err), MSG_NOT_DIR);
    assert_int_equal(symlink(f->outside, H(f, "link")), 0);
    EXPECT_REFUSED(ws_file_mkdir(&f->t, P("link"), true, &err), MSG_NOT_DIR);
    EXPECT_REFUSED(ws_file_mkdir(&f->t, P("link"), false, &err), MSG_EXISTS);
}

/* ---- delete ---- */

static void test_delete(void **state)
{
    struct fx *f = *state;
    struct sl_error err;
    EXPECT_REFUSED(ws_file_delete(&f->t, P("/workspace"), true, &err), MSG_ROOT_DELETE);
    EXPECT_REFUSED(ws_file_delete(&f->t, P("."), false, &err), MSG_ROOT_DELETE);
    EXPECT_REFUSED(ws_file_delete(&f->t, P("missing"), false, &err), MSG_NO_SUCH);
    EXPECT_REFUSED(ws_file_delete(&f->t, P("missing/x"), true, &err), MSG_NO_SUCH);

    put_host(H(f, "file"), "f", 0600);
    EXPECT_OK(ws_file_delete(&f->t, P("file"), false, &err));
    assert_false(host_exists(H(f, "file")));
    assert_int_equal(mkfifo(H(f, "fifo"), 0600), 0);
    EXPECT_OK(ws_file_delete(&f->t, P("fifo"), true, &err));
    assert_false(host_exists(H(f, "fifo")));

    assert_int_equal(mkdir(H(f, "empty"), 0700), 0);
    EXPECT_OK(ws_file_delete(&f->t, P("empty"), false, &err));
    assert_false(host_exists(H(f, "empty")));

    /* A tree with a link to an outside directory full of content. */
    assert_int_equal(mkdir(H(f, "tree"), 0700), 0);
    assert_int_equal(mkdir(H(f, "tree/sub"), 0700), 0);
    put_host(H(f, "tree/sub/x"), "x", 0000);
    assert_int_equal(mkdir(H(f, "tree/sub/deeper"), 0700), 0);
    /* A directory its owner cannot read is no obstacle for the service. */
    if (geteuid() == 0)
        assert_int_equal(chmod(H(f, "tree/sub"), 0000), 0);
    put_host(O(f, "precious"), "keep me", 0600);
    assert_int_equal(symlink(f->outside, H(f, "tree/sub/escape")), 0);
    assert_int_equal(symlink(O(f, "precious"), H(f, "tree/file_link")), 0);

    EXPECT_REFUSED(ws_file_delete(&f->t, P("tree"), false, &err), MSG_NOT_EMPTY);
    assert_true(host_exists(H(f, "tree/sub/x")));
    EXPECT_OK(ws_file_delete(&f->t, P("/workspace/tree/"), true, &err));
    assert_false(host_exists(H(f, "tree")));
    assert_host_content(O(f, "precious"), "keep me");
}

static void test_delete_deep_tree(void **state)
{
    struct fx *f = *state;
    struct sl_error err;
    /* Deeper than the removal's descriptor budget: subtrees get moved up. */
    int fd = open(f->ws, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_true(fd >= 0);
    for (int i = 0; i < 300; i++) {
        assert_int_equal(mkdirat(fd, "d", 0700), 0);
        int sib = openat(fd, "f", O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        assert_true(sib >= 0);
        close(sib);
        int next = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        assert_true(next >= 0);
        close(fd);
        fd = next;
    }
    assert_int_equal(symlinkat(f->outside, fd, "escape"), 0);
    close(fd);
    put_host(O(f, "precious"), "keep me", 0600);

    EXPECT_OK(ws_file_delete(&f->t, P("d"), true, &err));
    assert_false(host_exists(H(f, "d")));
    assert_true(host_exists(H(f, "f")));
    assert_host_content(O(f, "precious"), "keep me");
    assert_no_temp(f->ws);
}

static void test_remove_tree_at(void **state)
{
    struct fx *f = *state;
    struct sl_error err;
    assert_int_equal(mkdir(H(f, "t"), 0700), 0);
    assert_int_equal(mkdir(H(f, "t/u"), 0700), 0);
    put_host(H(f, "t/u/v"), "v", 0600);
    int ws = open(f->ws, O_PATH | O_DIRECTORY | O_CLOEXEC);
    assert_true(ws >= 0);
    EXPECT_OK(ws_remove_tree_at(ws, "t", &err));
    assert_false(host_exists(H(f, "t")));
    EXPECT_OK(ws_remove_tree_at(ws, "t", &err)); /* already gone */
    put_host(H(f, "plain"), "p", 0600);
    EXPECT_OK(ws_remove_tree_at(ws, "plain", &err));
    assert_false(host_exists(H(f, "plain")));
    close(ws);
}

/* ---- move ---- */

static void test_move(void **state)
{
    struct fx *f = *state;
    struct sl_error err;
    EXPECT_OK(ws_file_move(&f->t, P("nothing"), P("/workspace/nothing/"), false, &err));
    EXPECT_OK(ws_file_move(&f->t, P("/"), P("/workspace"), false, &err));
    EXPECT_REFUSED(ws_file_move(&f->t, P("/"), P("x"), false, &err), MSG_ROOT_MOVE);
    EXPECT_REFUSED(ws_file_move(&f->t, P("x"), P("/workspace"), true, &err), MSG_ROOT_MOVE);
    EXPECT_REFUSED(ws_file_move(&f->t, P("x/../y"), P("z"), true, &err), MSG_NUL);
    EXPECT_REFUSED(ws_file_move(&f->t, P("z"), P("x/../y"), true, &err), MSG_NUL);

    EXPECT_REFUSED(ws_file_move(&f->t, P("nop/a"), P("nop2/b"), false, &err), MSG_NO_SRC_PARENT);
    put_host(H(f, "a"), "A", 0600);
    EXPECT_REFUSED(ws_file_move(&f->t, P("a"), P("nop/b"), false, &err), MSG_NO_DST_PARENT);
    assert_false(host_exists(H(f, "nop")));
    EXPECT_REFUSED(ws_file_move(&f->t, P("missing"), P("b"), false, &err), MSG_NO_SRC);

    /* Plain rename, into a directory whose chain is handed to the sandbox. */
    assert_int_equal(mkdir(H(f, "dst"), 0755), 0);
    EXPECT_OK(ws_file_move(&f->t, P("a"), P("dst/a2"), false, &err));
    assert_false(host_exists(H(f, "a")));
    assert_host_content(H(f, "dst/a2"), "A");
    assert_owned(f, H(f, "dst"), 0700);

    /* Existing destination file. */
    put_host(H(f, "b"), "B", 0600);
    EXPECT_REFUSED(ws_file_move(&f->t, P("b"), P("dst/a2"), false, &err), MSG_DST_EXISTS);
    EXPECT_OK(ws_file_move(&f->t, P("b"), P("dst/a2"), true, &err));
    assert_host_content(H(f, "dst/a2"), "B");
    assert_false(host_exists(H(f, "b")));

    /* Existing destination directory: removed first with overwrite. */
    assert_int_equal(mkdir(H(f, "olddir"), 0700), 0);
    put_host(H(f, "olddir/junk"), "j", 0600);
    put_host(H(f, "c"), "C", 0600);
    EXPECT_REFUSED(ws_file_move(&f->t, P("c"), P("olddir"), false, &err), MSG_DST_EXISTS);
    EXPECT_OK(ws_file_move(&f->t, P("c"), P("olddir"), true, &err));
    assert_host_content(H(f, "olddir"), "C");

    /* Overlapping directories. */
    assert_int_equal(mkdir(H(f, "p"), 0700), 0);
    assert_int_equal(mkdir(H(f, "p/c"), 0700), 0);
    put_host(H(f, "p/c/keep"), "k", 0600);
    EXPECT_REFUSED(ws_file_move(&f->t, P("p/c"), P("p"), true, &err), MSG_OVERLAP);
    EXPECT_REFUSED(ws_file_move(&f->t, P("p"), P("p/c"), true, &err), MSG_OVERLAP);
    EXPECT_REFUSED(ws_file_move(&f->t, P("p/c"), P("p"), false, &err), MSG_DST_EXISTS);
    assert_host_content(H(f, "p/c/keep"), "k");

    /* Directory onto a directory that only shares a name prefix. */
    assert_int_equal(mkdir(H(f, "pp"), 0700), 0);
    EXPECT_OK(ws_file_move(&f->t, P("p"), P("pp"), true, &err));
    assert_host_content(H(f, "pp/c/keep"), "k");
    assert_false(host_exists(H(f, "p")));

    /* A symlink source moves as a link. */
    put_host(O(f, "target"), "T", 0600);
    assert_int_equal(symlink(O(f, "target"), H(f, "lnk")), 0);
    EXPECT_OK(ws_file_move(&f->t, P("lnk"), P("pp/lnk"), false, &err));
    struct stat st;
    assert_int_equal(lstat(H(f, "pp/lnk"), &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    assert_host_content(O(f, "target"), "T");

    /* A symlink destination is replaced, not followed. */
    put_host(H(f, "d"), "D", 0600);
    EXPECT_OK(ws_file_move(&f->t, P("d"), P("pp/lnk"), true, &err));
    assert_host_content(H(f, "pp/lnk"), "D");
    assert_host_content(O(f, "target"), "T");
}

/* ---- locks ---- */

static int hold_path_lock(const struct fx *f, const char *key, int op)
{
    char hex[65], p[PATH_MAX];
    sl_sha256_hex(key, strlen(key), hex);
    snprintf(p, sizeof(p), "%s/.file-locks/path-%s.lock", f->root, hex);
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(flock(fd, op | LOCK_NB), 0);
    return fd;
}

static void test_path_lock_contention(void **state)
{
    struct fx *f = *state;
    struct sl_error err;
    struct sl_buf out;
    struct sl_ws_listing l;
    put_host(H(f, "a.txt"), "a", 0600);

    int fd = hold_path_lock(f, "/workspace/a.txt", LOCK_EX);
    EXPECT_LOCKED(ws_file_read(&f->t, P("/workspace/./a.txt"), &out, &err));
    EXPECT_LOCKED(ws_file_write(&f->t, P("a.txt"), "b", 1, &err));
    EXPECT_LOCKED(ws_file_delete(&f->t, P("a.txt"), false, &err));
    EXPECT_LOCKED(ws_file_move(&f->t, P("a.txt"), P("z.txt"), false, &err));
    EXPECT_LOCKED(ws_file_move(&f->t, P("y.txt"), P("a.txt"), false, &err));
    /* Locks cover the exact path only. */
    EXPECT_OK(ws_file_write(&f->t, P("other.txt"), "o", 1, &err));
    EXPECT_OK(ws_file_list(&f->t, P("/"), 10, 0, &l, &err));
    sl_ws_listing_free(&l);
    close(fd);

    /* Shared holders admit readers only. */
    fd = hold_path_lock(f, "/workspace/a.txt", LOCK_SH);
    EXPECT_OK(ws_file_read(&f->t, P("a.txt"), &out, &err));
    sl_buf_free(&out);
    EXPECT_LOCKED(ws_file_write(&f->t, P("a.txt"), "b", 1, &err));
    close(fd);
    EXPECT_OK(ws_file_write(&f->t, P("a.txt"), "b", 1, &err));

    /* The root's key is "/workspace/". */
    fd = hold_path_lock(f, "/workspace/", LOCK_EX);
    EXPECT_LOCKED(ws_file_list(&f->t, P("/workspace"), 10, 0, &l, &err));
    close(fd);
}

static void test_global_lock(void **state)
{
    struct fx *f = *state;
    struct sl_error err;
    struct sl_buf out;
    struct sl_ws_listing l;

    int ex = ws_lock_global(f->root_fd, true, false, SL_E_SHARED_WORKSPACE_LOCKED, &err);
    assert_true(ex >= 0);
    EXPECT_LOCKED(ws_file_write(&f->t, P("x"), "x", 1, &err));
    EXPECT_LOCKED(ws_file_read(&f->t, P("x"), &out, &err));
    EXPECT_LOCKED(ws_file_list(&f->t, P("/"), 1, 0, &l, &err));
    EXPECT_LOCKED(ws_file_mkdir(&f->t, P("d"), true, &err));
    EXPECT_LOCKED(ws_file_delete(&f->t, P("x"), true, &err));
    EXPECT_LOCKED(ws_file_move(&f->t, P("x"), P("y"), true, &err));
    assert_false(host_exists(H(f, "x")));

    /* Another exclusive or shared taker sees the caller's busy code. */
    sl_error_clear(&err);
    assert_int_equal(ws_lock_global(f->root_fd, false, false, SL_E_SHARED_WORKSPACE_LOCKED, &err),
                     -1);
    assert_int_equal(errno, EWOULDBLOCK);
    assert_string_equal(err.code, SL_E_SHARED_WORKSPACE_LOCKED);
    assert_string_equal(err.message, SL_E_SHARED_WORKSPACE_LOCKED);
    close(ex);

    /* Shared holders (scoped executions) and file calls coexist... */
    int sh = ws_lock_global(f->root_fd, false, false, SL_E_SHARED_WORKSPACE_LOCKED, &err);
    assert_true(sh >= 0);
    EXPECT_OK(ws_file_write(&f->t, P("x"), "x", 1, &err));
    /* ...but keep an unscoped execution out. */
    assert_int_equal(ws_lock_global(f->root_fd, true, false, SL_E_SHARED_WORKSPACE_LOCKED, &err),
                     -1);
    assert_string_equal(err.code, SL_E_SHARED_WORKSPACE_LOCKED);
    close(sh);
    ex = ws_lock_global(f->root_fd, true, true, SL_E_SHARED_WORKSPACE_LOCKED, &err);
    assert_true(ex >= 0);
    close(ex);
}

static void test_scope_lock(void **state)
{
    struct fx *f = *state;
    struct sl_error err;
    int a = ws_lock_scope(f->root_fd, "build-1", SL_E_EXEC_SCOPE_BUSY, &err);
    assert_true(a >= 0);
    assert_int_equal(ws_lock_scope(f->root_fd, "build-1", SL_E_EXEC_SCOPE_BUSY, &err), -1);
    assert_string_equal(err.code, SL_E_EXEC_SCOPE_BUSY);
    int b = ws_lock_scope(f->root_fd, "build-2", SL_E_EXEC_SCOPE_BUSY, &err);
    assert_true(b >= 0);
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/.exec-locks/scope-build-1.lock", f->root);
    assert_true(host_exists(p));
    assert_int_equal(ws_lock_scope(f->root_fd, "../x", SL_E_EXEC_SCOPE_BUSY, &err), -1);
    close(a);
    close(b);
}

static void test_lock_dirs_created(void **state)
{
    struct fx *f = *state;
    struct sl_error err;
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/.file-locks", f->root);
    assert_int_equal(rmdir(p), 0);
    snprintf(p, sizeof(p), "%s/.exec-locks", f->root);
    assert_int_equal(rmdir(p), 0);
    EXPECT_OK(ws_file_write(&f->t, P("x"), "x", 1, &err));
    struct stat st;
    assert_int_equal(lstat(p, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(st.st_mode & 07777, 0700);
    snprintf(p, sizeof(p), "%s/.file-locks", f->root);
    assert_int_equal(lstat(p, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0700);

    /* A lock directory replaced by a link is never followed. */
    assert_int_equal(rename(p, O(f, "moved-locks")), 0);
    assert_int_equal(symlink(O(f, "moved-locks"), p), 0);
    sl_error_clear(&err);
    assert_int_equal(ws_file_write(&f->t, P("y"), "y", 1, &err), -1);
    assert_string_equal(err.message, "workspace operation could not be completed");
    assert_false(host_exists(H(f, "y")));
}

static void test_missing_workspace(void **state)
{
    struct fx *f = *state;
    struct sl_error err;
    assert_int_equal(rmdir(f->ws), 0);
    assert_int_equal(symlink(f->outside, f->ws), 0);
    EXPECT_REFUSED(ws_file_write(&f->t, P("x"), "x", 1, &err),
                   "workspace operation could not be completed");
    assert_false(host_exists(O(f, "x")));
    assert_null(strstr(err.message, f->base)); /* no host path for the client */
}

/* ---- base64 ---- */

static void expect_b64_invalid(const char *in)
{
    struct sl_buf out;
    struct sl_error err;
    sl_error_clear(&err);
    if (sl_base64_decode_strict(in, strlen(in), &out, 1 << 20, &err) != -1)
        fail_msg("'%s' accepted", in);
    assert_string_equal(err.code, SL_E_INVALID_ARGUMENT);
    assert_string_equal(err.message, MSG_B64);
    assert_null(out.data);
}

static void expect_b64(const char *in, const void *want, size_t want_len)
{
    struct sl_buf out;
    struct sl_error err;
    if (sl_base64_decode_strict(in, strlen(in), &out, 1 << 20, &err) != 0)
        fail_msg("'%s' refused: %s", in, err.message);
    assert_int_equal(out.len, want_len);
    assert_memory_equal(out.data, want, want_len);
    assert_int_equal(out.data[out.len], '\0');
    sl_buf_free(&out);
}

static void test_base64_decode(void **state)
{
    (void)state;
    expect_b64("", "", 0);
    expect_b64("Zg==", "f", 1);
    expect_b64("Zm8=", "fo", 2);
    expect_b64("Zm9v", "foo", 3);
    expect_b64("Zm9vYg==", "foob", 4);
    expect_b64("Zm9vYmFy", "foobar", 6);
    expect_b64("aGVsbG8=", "hello", 5);
    expect_b64("+/+/", "\xfb\xff\xbf", 3);
    expect_b64("AAE=", "\x00\x01", 2);

    expect_b64_invalid("aGVsbG8"); /* missing padding */
    expect_b64_invalid("Zg");
    expect_b64_invalid("Zg=");
    expect_b64_invalid("aGVs bG8="); /* whitespace */
    expect_b64_invalid("aGVsbG8=\n");
    expect_b64_invalid("aGVs\nbG8=");
    expect_b64_invalid(" Zm9v");
    expect_b64_invalid("aGVsbG8*"); /* bad character */
    expect_b64_invalid("Zm9v-_=="); /* URL alphabet */
    /* Non-canonical trailing bits are ignored, as Python's
     * b64decode(validate=True) does. */
    expect_b64("aGVsbG9=", "hello", 5);
    expect_b64("Zh==", "f", 1);
    expect_b64("QR==", "A", 1);
    expect_b64_invalid("Z==="); /* too much padding */
    expect_b64_invalid("====");
    expect_b64_invalid("=Zm9");
    expect_b64_invalid("Zm=v");     /* padding inside */
    expect_b64_invalid("Zg==Zg=="); /* padding before the end */
    expect_b64_invalid("Zm9v=");

    struct sl_buf out;
    struct sl_error err;
    /* Embedded NUL inside len is just a bad character. */
    assert_int_equal(sl_base64_decode_strict("Zm\0v", 4, &out, 100, &err), -1);
    assert_string_equal(err.message, MSG_B64);
}

static void test_base64_size_limit(void **state)
{
    (void)state;
    struct sl_buf out;
    struct sl_error err;
    assert_int_equal(sl_base64_decode_strict(P("aGVsbG8="), &out, 4, &err), -1);
    assert_string_equal(err.code, SL_E_INVALID_ARGUMENT);
    assert_string_equal(err.message, MSG_TOO_LARGE);
    /* Exactly at the limit is fine: padding is not counted. */
    assert_int_equal(sl_base64_decode_strict(P("aGVsbG8="), &out, 5, &err), 0);
    assert_int_equal(out.len, 5);
    sl_buf_free(&out);
    assert_int_equal(sl_base64_decode_strict(P("Zm9vYmFy"), &out, 5, &err), -1);
    assert_string_equal(err.message, MSG_TOO_LARGE);
    assert_int_equal(sl_base64_decode_strict(P(""), &out, 0, &err), 0);
    sl_buf_free(&out);
}

static void test_base64_encode(void **state)
{
    (void)state;
    static const struct {
        const char *in, *std, *url;
    } vec[] = {
        {"", "", ""},
        {"f", "Zg==", "Zg"},
        {"fo", "Zm8=", "Zm8"},
        {"foo", "Zm9v", "Zm9v"},
        {"foob", "Zm9vYg==", "Zm9vYg"},
        {"\xfb\xff", "+/8=", "-_8"},
    };
    for (size_t i = 0; i < sizeof(vec) / sizeof(vec[0]); i++) {
        char *s = sl_base64_encode(vec[i].in, strlen(vec[i].in));
        assert_string_equal(s, vec[i].std);
        free(s);
        s = sl_base64url_nopad(vec[i].in, strlen(vec[i].in));
        assert_string_equal(s, vec[i].url);
        free(s);
    }
    unsigned char data[300];
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (unsigned char)(i * 131 + 7);
    for (size_t len = 0; len <= sizeof(data); len += 1 + len / 8) {
        char *s = sl_base64_encode(data, len);
        assert_non_null(s);
        struct sl_buf out;
        struct sl_error err;
        assert_int_equal(sl_base64_decode_strict(s, strlen(s), &out, len, &err), 0);
        assert_int_equal(out.len, len);
        if (len)
            assert_memory_equal(out.data, data, len);
        sl_buf_free(&out);
        free(s);
    }
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_write_read_roundtrip),
        T(test_write_existing_chain_fixed),
        T(test_write_overwrite_mode),
        T(test_write_refusals),
        T(test_symlink_directory_component),
        T(test_final_symlink),
        T(test_read_refusals),
        T(test_list),
        T(test_list_empty),
        T(test_mkdir),
        T(test_delete),
        T(test_delete_deep_tree),
        T(test_remove_tree_at),
        T(test_move),
        T(test_path_lock_contention),
        T(test_global_lock),
        T(test_scope_lock),
        T(test_lock_dirs_created),
        T(test_missing_workspace),
        cmocka_unit_test(test_base64_decode),
        cmocka_unit_test(test_base64_size_limit),
        cmocka_unit_test(test_base64_encode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
