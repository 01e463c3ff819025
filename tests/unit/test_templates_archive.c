/* Template archives (spec API.md §6.3, §6.4): determinism of the archive,
 * its members and metadata read back with libarchive, the snapshot limits
 * and refusals, and extraction: round trip, digest check and every kind of
 * malicious archive (crafted here with libarchive) refused.
 *
 * Everything happens under one temporary directory, removed at the end.
 * The ownership part of the determinism case needs root (skipped
 * otherwise). */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <locale.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/cleanup.h"
#include "common/error.h"
#include "templates/archive.h"
#include "templates/catalog.h"

static char base[] = "/tmp/sl-tpl-test-XXXXXX";
static int case_no;

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */

static char *pathf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *pathf(const char *fmt, ...)
{
    static char bufs[8][PATH_MAX];
    static int next;
    char *b = bufs[next++ % 8];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b, PATH_MAX, fmt, ap);
    va_end(ap);
    assert_true(n > 0 && n < PATH_MAX);
    return b;
}

/* A fresh directory for one case: <base>/<n>. */
static const char *case_dir(void)
{
    static char dirs[64][64];
    assert_true(case_no < 64);
    char *d = dirs[case_no];
    snprintf(d, sizeof(dirs[0]), "%s/%d", base, case_no + 1);
    case_no++;
    assert_int_equal(mkdir(d, 0755), 0);
    return d;
}

static void put_file(const char *path, const char *content, size_t len, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, content, len), (ssize_t)len);
    assert_int_equal(fchmod(fd, mode), 0);
    close(fd);
}

static void put_text(const char *path, const char *text, mode_t mode)
{
    put_file(path, text, strlen(text), mode);
}

static void put_dir(const char *path, mode_t mode)
{
    assert_int_equal(mkdir(path, 0700), 0);
    assert_int_equal(chmod(path, mode), 0);
}

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)f;
    return flag == FTW_DP ? rmdir(p) : unlink(p);
}

static void rm_rf(const char *path)
{
    nftw(path, rm_cb, 32, FTW_DEPTH | FTW_PHYS);
}

static bool exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

static int archive_dir(const char *src, const char *out, const struct sl_tpl_limits *lim,
                       struct sl_tpl_archive_info *info, struct sl_error *err)
{
    int fd = open(src, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    assert_true(fd >= 0);
    int rc = sl_tpl_archive(fd, out, lim, info, err);
    close(fd);
    return rc;
}

static void must_archive(const char *src, const char *out, struct sl_tpl_archive_info *info)
{
    struct sl_error err = {0};
    if (archive_dir(src, out, NULL, info, &err) != 0)
        fail_msg("archive %s: %s", src, sl_error_text(&err));
}

static char *read_all(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    char *buf = malloc((size_t)st.st_size + 1);
    assert_non_null(buf);
    assert_int_equal(read(fd, buf, (size_t)st.st_size), st.st_size);
    buf[st.st_size] = '\0';
    close(fd);
    *len = (size_t)st.st_size;
    return buf;
}

static void sha256_file(const char *path, char out[SL_TPL_DIGEST_SIZE])
{
    size_t len;
    char *data = read_all(path, &len);
    unsigned char md[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)data, len, md);
    free(data);
    strcpy(out, "sha256:");
    for (int i = 0; i < SHA256_DIGEST_LENGTH; i++)
        sprintf(out + 7 + 2 * i, "%02x", md[i]);
}

static bool same_bytes(const char *a, const char *b)
{
    size_t la, lb;
    char *da = read_all(a, &la), *db = read_all(b, &lb);
    bool same = la == lb && memcmp(da, db, la) == 0;
    free(da);
    free(db);
    return same;
}

/* Apply fn to every path below dir (not dir itself), deepest first. */
static void each_below(const char *dir, void (*fn)(const char *path))
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char *p = strdup(pathf("%s/%s", dir, de->d_name));
        struct stat st;
        assert_int_equal(lstat(p, &st), 0);
        if (S_ISDIR(st.st_mode))
            each_below(p, fn);
        fn(p);
        free(p);
    }
    closedir(d);
}

static void touch_times(const char *path)
{
    static long n = 1;
    struct timespec ts[2] = {{.tv_sec = 1000000 + n, .tv_nsec = 123 * n},
                             {.tv_sec = 2000000 + n, .tv_nsec = 456 * n}};
    n++;
    assert_int_equal(utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW), 0);
}

static void chown_other(const char *path)
{
    assert_int_equal(lchown(path, 4321, 8765), 0);
}

/* The tree most cases archive: nested directories, modes, both kinds of
 * symlink, an empty directory, names that sort differently as whole paths
 * than depth-first, non-ASCII and non-UTF-8 names, a name longer than the
 * ustar fields. */
static const char *long_name(void)
{
    static char name[201];
    memset(name, 'L', 200);
    name[200] = '\0';
    return name;
}

static void build_tree(const char *root)
{
    put_dir(pathf("%s/a", root), 0755);
    put_text(pathf("%s/a/z", root), "inside a\n", 0644);
    put_text(pathf("%s/a-b", root), "dash\n", 0600);
    put_text(pathf("%s/B", root), "upper\n", 0640);
    put_dir(pathf("%s/bin", root), 0751);
    put_text(pathf("%s/bin/tool", root), "#!/bin/sh\necho hi\n", 0755);
    put_text(pathf("%s/bin/suid", root), "s", 04755);
    assert_int_equal(symlink("tool", pathf("%s/bin/rel", root)), 0);
    assert_int_equal(symlink("../a/z", pathf("%s/bin/up", root)), 0);
    assert_int_equal(symlink("/usr/bin/python3", pathf("%s/bin/abs", root)), 0);
    put_dir(pathf("%s/empty", root), 0700);
    put_dir(pathf("%s/deep", root), 0755);
    put_dir(pathf("%s/deep/%s", root, long_name()), 0755);
    put_text(pathf("%s/deep/%s/%s", root, long_name(), long_name()), "long\n", 0644);
    put_text(pathf("%s/caf\xc3\xa9", root), "utf8\n", 0644);
    put_text(pathf("%s/raw\xff\xfe", root), "bytes\n", 0644);
    char big[70000];
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (char)(i * 7 + i / 251);
    put_file(pathf("%s/a/big.bin", root), big, sizeof(big), 0644);
}

/* Members of an archive as read back by libarchive. */
struct member {
    char name[1024];
    mode_t type;
    mode_t perm;
    int64_t size;
    int64_t uid, gid;
    const char *uname_set, *gname_set;
    int64_t mtime;
    bool atime_set, ctime_set, birth_set;
    char symlink[PATH_MAX];
    char hardlink[PATH_MAX];
};

static size_t read_members(const char *path, struct member *out, size_t max)
{
    struct archive *a = archive_read_new();
    archive_read_support_filter_gzip(a);
    archive_read_support_format_tar(a);
    assert_int_equal(archive_read_open_filename(a, path, 10240), ARCHIVE_OK);
    size_t n = 0;
    struct archive_entry *e;
    int r;
    while ((r = archive_read_next_header(a, &e)) == ARCHIVE_OK || r == ARCHIVE_WARN) {
        assert_true(n < max);
        struct member *m = &out[n++];
        memset(m, 0, sizeof(*m));
        snprintf(m->name, sizeof(m->name), "%s", archive_entry_pathname(e));
        m->type = archive_entry_filetype(e);
        m->perm = archive_entry_perm(e);
        m->size = archive_entry_size(e);
        m->uid = archive_entry_uid(e);
        m->gid = archive_entry_gid(e);
        m->uname_set = archive_entry_uname(e) && archive_entry_uname(e)[0] ? "set" : NULL;
        m->gname_set = archive_entry_gname(e) && archive_entry_gname(e)[0] ? "set" : NULL;
        m->mtime = archive_entry_mtime(e);
        m->atime_set = archive_entry_atime_is_set(e);
        m->ctime_set = archive_entry_ctime_is_set(e);
        m->birth_set = archive_entry_birthtime_is_set(e);
        if (archive_entry_symlink(e))
            snprintf(m->symlink, sizeof(m->symlink), "%s", archive_entry_symlink(e));
        if (archive_entry_hardlink(e))
            snprintf(m->hardlink, sizeof(m->hardlink), "%s", archive_entry_hardlink(e));
    }
    assert_int_equal(r, ARCHIVE_EOF);
    archive_read_free(a);
    return n;
}

/* The uncompressed tar stream. */
static char *read_tar(const char *path, size_t *len)
{
    struct archive *a = archive_read_new();
    archive_read_support_filter_gzip(a);
    archive_read_support_format_raw(a);
    assert_int_equal(archive_read_open_filename(a, path, 10240), ARCHIVE_OK);
    struct archive_entry *e;
    assert_int_equal(archive_read_next_header(a, &e), ARCHIVE_OK);
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (n == cap)
            buf = realloc(buf, cap *= 2);
        la_ssize_t r = archive_read_data(a, buf + n, cap - n);
        assert_true(r >= 0);
        if (r == 0)
            break;
        n += (size_t)r;
    }
    archive_read_free(a);
    *len = n;
    return buf;
}

static bool mem_contains(const char *hay, size_t len, const char *needle)
{
    return memmem(hay, len, needle, strlen(needle)) != NULL;
}

/* Compare two extracted trees: same names, types, contents, link targets;
 * permission bits of `got` as extraction must leave them. */
static void compare_trees(const char *want, const char *got, bool sanitized)
{
    struct dirent **wl = NULL, **gl = NULL;
    int wn = scandir(want, &wl, NULL, alphasort);
    int gn = scandir(got, &gl, NULL, alphasort);
    assert_true(wn >= 0 && gn >= 0);
    if (wn != gn)
        fail_msg("%s has %d entries, %s has %d", want, wn, got, gn);
    for (int i = 0; i < wn; i++) {
        assert_string_equal(wl[i]->d_name, gl[i]->d_name);
        if (!strcmp(wl[i]->d_name, ".") || !strcmp(wl[i]->d_name, ".."))
            continue;
        char *wp = strdup(pathf("%s/%s", want, wl[i]->d_name));
        char *gp = strdup(pathf("%s/%s", got, gl[i]->d_name));
        struct stat ws, gs;
        assert_int_equal(lstat(wp, &ws), 0);
        assert_int_equal(lstat(gp, &gs), 0);
        assert_int_equal(ws.st_mode & S_IFMT, gs.st_mode & S_IFMT);
        if (S_ISREG(ws.st_mode)) {
            mode_t expect = ws.st_mode & 07777;
            if (sanitized)
                expect &= ~(mode_t)(S_ISUID | S_ISGID | S_IWGRP | S_IWOTH);
            assert_int_equal(gs.st_mode & 07777, expect);
            assert_true(same_bytes(wp, gp));
        } else if (S_ISDIR(ws.st_mode)) {
            mode_t expect = ws.st_mode & 07777;
            if (sanitized)
                expect = (expect & ~(mode_t)(S_ISUID | S_ISGID | S_IWGRP | S_IWOTH)) | 0155;
            assert_int_equal(gs.st_mode & 07777, expect);
            compare_trees(wp, gp, sanitized);
        } else if (S_ISLNK(ws.st_mode)) {
            char wt[PATH_MAX], gt[PATH_MAX];
            ssize_t a = readlink(wp, wt, sizeof(wt)), b = readlink(gp, gt, sizeof(gt));
            assert_true(a > 0 && a == b);
            assert_memory_equal(wt, gt, (size_t)a);
        }
        free(wp);
        free(gp);
    }
    for (int i = 0; i < wn; i++)
        free(wl[i]);
    for (int i = 0; i < gn; i++)
        free(gl[i]);
    free(wl);
    free(gl);
}

/* ------------------------------------------------------------------------ */
/* Crafting archives                                                         */

struct craft {
    const char *name;
    mode_t type; /* AE_IF*; 0 with hardlink set = hard link */
    mode_t perm;
    const char *data;     /* regular files */
    int64_t size;         /* declared size when data is NULL (content zeros) */
    const char *linkname; /* symlink target */
    const char *hardlink; /* hard link target */
};

static void craft_archive(const char *path, const struct craft *items, size_t n)
{
    struct archive *a = archive_write_new();
    assert_int_equal(archive_write_set_format_pax_restricted(a), ARCHIVE_OK);
    assert_int_equal(archive_write_add_filter_gzip(a), ARCHIVE_OK);
    assert_int_equal(archive_write_open_filename(a, path), ARCHIVE_OK);
    for (size_t i = 0; i < n; i++) {
        const struct craft *c = &items[i];
        struct archive_entry *e = archive_entry_new();
        archive_entry_set_pathname(e, c->name);
        archive_entry_set_filetype(e, c->type ? c->type : AE_IFREG);
        archive_entry_set_perm(e, c->perm ? c->perm : 0644);
        int64_t size = c->data ? (int64_t)strlen(c->data) : c->size;
        archive_entry_set_size(e, c->type == AE_IFREG || c->type == 0 ? size : 0);
        if (c->linkname)
            archive_entry_set_symlink(e, c->linkname);
        if (c->hardlink)
            archive_entry_set_hardlink(e, c->hardlink);
        if (c->type == AE_IFCHR || c->type == AE_IFBLK)
            archive_entry_set_rdev(e, makedev(1, 3));
        assert_true(archive_write_header(a, e) >= ARCHIVE_WARN);
        if (c->data) {
            assert_int_equal(archive_write_data(a, c->data, strlen(c->data)),
                             (la_ssize_t)strlen(c->data));
        } else if ((c->type == AE_IFREG || c->type == 0) && !c->hardlink && c->size > 0) {
            static const char zeros[4096];
            for (int64_t left = c->size; left > 0;) {
                size_t k = left < (int64_t)sizeof(zeros) ? (size_t)left : sizeof(zeros);
                assert_int_equal(archive_write_data(a, zeros, k), (la_ssize_t)k);
                left -= (int64_t)k;
            }
        }
        archive_entry_free(e);
    }
    assert_int_equal(archive_write_close(a), ARCHIVE_OK);
    archive_write_free(a);
}

/* Extract a crafted archive into <dir>/out with its true digest; returns
 * the result, leaves the error in err. */
static int extract_crafted(const char *dir, const struct craft *items, size_t n, int64_t max,
                           struct sl_error *err)
{
    char *tgz = strdup(pathf("%s/crafted.tar.gz", dir));
    craft_archive(tgz, items, n);
    char digest[SL_TPL_DIGEST_SIZE];
    sha256_file(tgz, digest);
    sl_error_clear(err);
    int rc = sl_tpl_extract(tgz, "evil", digest, pathf("%s/out", dir), max, err);
    free(tgz);
    return rc;
}

static void expect_refused(const struct craft *items, size_t n, int64_t max, const char *message)
{
    const char *dir = case_dir();
    struct sl_error err = {0};
    int rc = extract_crafted(dir, items, n, max, &err);
    if (rc == 0)
        fail_msg("archive with '%s' was extracted, expected: %s", items[n - 1].name, message);
    assert_string_equal(err.code, SL_E_INVALID_ARGUMENT);
    assert_string_equal(err.message, message);
    /* Nothing half-extracted stays behind. */
    assert_false(exists(pathf("%s/out", dir)));
}

#define MSG_ABS "template archive contains an absolute member name"
#define MSG_ESCAPE "template archive contains a member that escapes the destination"
#define MSG_SYMLINK "template archive contains a symlink that escapes the destination"
#define MSG_HARDLINK                                                                               \
    "template archive contains a hard link that is absolute or escapes the destination"
#define MSG_SPECIAL "template archive contains a device, FIFO or other special file"

/* ------------------------------------------------------------------------ */
/* Archive cases                                                             */

static void archive_is_deterministic(void **state)
{
    (void)state;
    const char *dir = case_dir();
    char *src = strdup(pathf("%s/src", dir));
    put_dir(src, 0755);
    build_tree(src);
    char *one = strdup(pathf("%s/one.tar.gz", dir));
    char *two = strdup(pathf("%s/two.tar.gz", dir));
    char *three = strdup(pathf("%s/three.tar.gz", dir));
    char *four = strdup(pathf("%s/four.tar.gz", dir));
    struct sl_tpl_archive_info i1 = {0}, i2 = {0}, i3 = {0}, i4 = {0};
    must_archive(src, one, &i1);
    must_archive(src, two, &i2);
    assert_string_equal(i1.digest, i2.digest);
    assert_true(same_bytes(one, two));
    /* Nor does the process locale change how names are stored. */
    if (setlocale(LC_ALL, "C.UTF-8")) {
        struct sl_tpl_archive_info iu = {0};
        must_archive(src, two, &iu);
        setlocale(LC_ALL, "C");
        assert_string_equal(i1.digest, iu.digest);
    } else {
        print_message("no C.UTF-8 locale: locale part skipped\n");
    }

    /* digest and size describe the compressed bytes. */
    char digest[SL_TPL_DIGEST_SIZE];
    sha256_file(one, digest);
    assert_string_equal(i1.digest, digest);
    struct stat st;
    assert_int_equal(stat(one, &st), 0);
    assert_int_equal(i1.size_bytes, st.st_size);
    assert_int_equal(strlen(i1.digest), 71);
    assert_int_equal(i1.entries, 17);
    char got[SL_TPL_DIGEST_SIZE];
    struct sl_error err = {0};
    assert_int_equal(sl_tpl_digest_file(one, got, &err), 0);
    assert_string_equal(got, digest);

    /* Times, access times and owners do not matter. */
    each_below(src, touch_times);
    if (geteuid() == 0) {
        each_below(src, chown_other);
        /* chown clears setuid; put the mode back, it is not what is tested */
        assert_int_equal(chmod(pathf("%s/bin/suid", src), 04755), 0);
    } else
        print_message("not root: ownership part skipped\n");
    must_archive(src, three, &i3);
    assert_string_equal(i1.digest, i3.digest);
    assert_true(same_bytes(one, three));

    /* One byte of content does. */
    put_text(pathf("%s/a/z", src), "inside A\n", 0644);
    must_archive(src, four, &i4);
    assert_string_not_equal(i1.digest, i4.digest);
    /* And so do permission bits. */
    put_text(pathf("%s/a/z", src), "inside a\n", 0644);
    must_archive(src, four, &i4);
    assert_string_equal(i1.digest, i4.digest);
    assert_int_equal(chmod(pathf("%s/a/z", src), 0600), 0);
    must_archive(src, four, &i4);
    assert_string_not_equal(i1.digest, i4.digest);

    /* gzip header: deflate, no flags (no name), mtime 0, OS unix; nothing
     * after the trailer. */
    size_t len;
    unsigned char *raw = (unsigned char *)read_all(one, &len);
    assert_true(len > 18);
    assert_int_equal(raw[0], 0x1f);
    assert_int_equal(raw[1], 0x8b);
    assert_int_equal(raw[2], 8);
    assert_int_equal(raw[3], 0);
    assert_int_equal(raw[4] | raw[5] | raw[6] | raw[7], 0);
    assert_int_equal(raw[8], 0);
    assert_int_equal(raw[9], 3);
    size_t tar_len;
    char *tar = read_tar(one, &tar_len);
    uint32_t isize = (uint32_t)raw[len - 4] | (uint32_t)raw[len - 3] << 8 |
                     (uint32_t)raw[len - 2] << 16 | (uint32_t)raw[len - 1] << 24;
    assert_int_equal(isize, (uint32_t)tar_len);
    assert_int_equal(tar_len % 512, 0);
    if (system("command -v gzip >/dev/null 2>&1") == 0)
        assert_int_equal(system(pathf("gzip -t %s", one)), 0);
    /* No time records in any pax header, no owner names anywhere. */
    assert_false(mem_contains(tar, tar_len, "atime="));
    assert_false(mem_contains(tar, tar_len, "ctime="));
    assert_false(mem_contains(tar, tar_len, "mtime="));
    assert_false(mem_contains(tar, tar_len, "root"));
    assert_true(mem_contains(tar, tar_len, "ustar"));
    free(tar);
    free(raw);
    free(src);
    free(one);
    free(two);
    free(three);
    free(four);
}

static void archive_members_and_metadata(void **state)
{
    (void)state;
    const char *dir = case_dir();
    char *src = strdup(pathf("%s/src", dir));
    put_dir(src, 0755);
    build_tree(src);
    char *tgz = strdup(pathf("%s/t.tar.gz", dir));
    struct sl_tpl_archive_info info = {0};
    must_archive(src, tgz, &info);

    static struct member m[64];
    size_t n = read_members(tgz, m, 64);
    char deep_dir[300], deep_file[600];
    snprintf(deep_dir, sizeof(deep_dir), "deep/%s/", long_name());
    snprintf(deep_file, sizeof(deep_file), "deep/%s/%s", long_name(), long_name());
    /* Depth-first, each level sorted by bytes: "a/z" before "a-b" although
     * '-' < '/'; "B" before "a"; directories end with '/'. */
    const struct {
        const char *name;
        mode_t type;
        mode_t perm;
        const char *target;
    } want[] = {
        {"B", AE_IFREG, 0640, NULL},
        {"a/", AE_IFDIR, 0755, NULL},
        {"a/big.bin", AE_IFREG, 0644, NULL},
        {"a/z", AE_IFREG, 0644, NULL},
        {"a-b", AE_IFREG, 0600, NULL},
        {"bin/", AE_IFDIR, 0751, NULL},
        {"bin/abs", AE_IFLNK, 0777, "/usr/bin/python3"},
        {"bin/rel", AE_IFLNK, 0777, "tool"},
        {"bin/suid", AE_IFREG, 04755, NULL},
        {"bin/tool", AE_IFREG, 0755, NULL},
        {"bin/up", AE_IFLNK, 0777, "../a/z"},
        {"caf\xc3\xa9", AE_IFREG, 0644, NULL},
        {"deep/", AE_IFDIR, 0755, NULL},
        {deep_dir, AE_IFDIR, 0755, NULL},
        {deep_file, AE_IFREG, 0644, NULL},
        {"empty/", AE_IFDIR, 0700, NULL},
        {"raw\xff\xfe", AE_IFREG, 0644, NULL},
    };
    assert_int_equal(n, SL_ARRAY_LEN(want));
    assert_int_equal(info.entries, (int64_t)n);
    for (size_t i = 0; i < n; i++) {
        assert_string_equal(m[i].name, want[i].name);
        assert_int_equal(m[i].type, want[i].type);
        if (want[i].type != AE_IFLNK)
            assert_int_equal(m[i].perm, want[i].perm);
        assert_int_equal(m[i].uid, 0);
        assert_int_equal(m[i].gid, 0);
        assert_null(m[i].uname_set);
        assert_null(m[i].gname_set);
        assert_int_equal(m[i].mtime, 0);
        assert_false(m[i].atime_set);
        assert_false(m[i].ctime_set);
        assert_false(m[i].birth_set);
        assert_false(m[i].name[0] == '/' || strncmp(m[i].name, "./", 2) == 0);
        if (want[i].target)
            assert_string_equal(m[i].symlink, want[i].target);
        else
            assert_string_equal(m[i].symlink, "");
    }
    assert_int_equal(m[2].size, 70000);
    assert_int_equal(info.source_bytes, 70000 + 9 + 5 + 6 + 18 + 1 + 5 + 5 + 6);
    free(src);
    free(tgz);
}

static void archive_refuses_special_files(void **state)
{
    (void)state;
    const char *dir = case_dir();
    char *src = strdup(pathf("%s/src", dir));
    put_dir(src, 0755);
    put_dir(pathf("%s/sub", src), 0755);
    put_text(pathf("%s/sub/a", src), "a", 0644);
    assert_int_equal(mkfifo(pathf("%s/sub/pipe", src), 0644), 0);
    char *out = strdup(pathf("%s/out.tar.gz", dir));
    struct sl_error err = {0};
    assert_int_equal(archive_dir(src, out, NULL, NULL, &err), -1);
    assert_string_equal(err.code, SL_E_INVALID_ARGUMENT);
    assert_string_equal(err.message, "template source contains an unsupported special file");
    assert_non_null(strstr(err.detail, "sub/pipe"));
    assert_false(exists(out)); /* no partial archive left */
    free(src);
    free(out);
}

static void expect_limit(const char *src, const struct sl_tpl_limits *lim, const char *message)
{
    char *out = strdup(pathf("%s.limit.tar.gz", src));
    struct sl_error err = {0};
    if (archive_dir(src, out, lim, NULL, &err) == 0)
        fail_msg("archived within limits, expected: %s", message);
    assert_string_equal(err.code, SL_E_INVALID_ARGUMENT);
    assert_string_equal(err.message, message);
    assert_false(exists(out));
    free(out);
}

static void expect_within(const char *src, const struct sl_tpl_limits *lim)
{
    char *out = strdup(pathf("%s.ok.tar.gz", src));
    struct sl_error err = {0};
    if (archive_dir(src, out, lim, NULL, &err) != 0)
        fail_msg("refused: %s", sl_error_text(&err));
    unlink(out);
    free(out);
}

static void archive_limits(void **state)
{
    (void)state;
    const char *dir = case_dir();
    char *src = strdup(pathf("%s/src", dir));
    put_dir(src, 0755);
    /* 5 entries, depth 3, 20 source bytes. */
    put_dir(pathf("%s/a", src), 0755);
    put_dir(pathf("%s/a/b", src), 0755);
    put_text(pathf("%s/a/b/c", src), "0123456789", 0644);
    put_text(pathf("%s/d", src), "0123456789", 0644);
    assert_int_equal(symlink("d", pathf("%s/e", src)), 0);

    expect_within(
        src, &(struct sl_tpl_limits){
                 .max_entries = 5, .max_depth = 3, .max_source_bytes = 20, .timeout_seconds = 60});
    expect_limit(src, &(struct sl_tpl_limits){.max_entries = 4},
                 "template snapshot exceeded its entry limit");
    expect_limit(src, &(struct sl_tpl_limits){.max_depth = 2},
                 "template snapshot exceeded its depth limit");
    expect_limit(src, &(struct sl_tpl_limits){.max_source_bytes = 19},
                 "template snapshot exceeded its source byte limit");
    expect_limit(src, &(struct sl_tpl_limits){.timeout_seconds = 1e-9},
                 "template snapshot exceeded its time limit");

    struct sl_tpl_archive_info info = {0};
    char *full = strdup(pathf("%s/full.tar.gz", dir));
    must_archive(src, full, &info);
    expect_within(src, &(struct sl_tpl_limits){.max_archive_bytes = info.size_bytes});
    expect_limit(
        src, &(struct sl_tpl_limits){.max_archive_bytes = info.size_bytes - 1},
        pathf("template archive is over the %lld byte limit", (long long)info.size_bytes - 1));
    expect_limit(src, &(struct sl_tpl_limits){.max_archive_bytes = 10},
                 "template archive is over the 10 byte limit");
    free(src);
    free(full);
}

/* A writer that keeps changing the file's times while it is archived. */
struct toucher {
    const char *path;
    volatile bool stop;
};

static void *toucher_run(void *arg)
{
    struct toucher *t = arg;
    long n = 0;
    while (!t->stop) {
        struct timespec ts[2] = {{.tv_sec = 5, .tv_nsec = n % 1000000000},
                                 {.tv_sec = 5, .tv_nsec = n % 1000000000}};
        utimensat(AT_FDCWD, t->path, ts, 0);
        n++;
    }
    return NULL;
}

static void archive_detects_changes(void **state)
{
    (void)state;
    const char *dir = case_dir();
    char *src = strdup(pathf("%s/src", dir));
    put_dir(src, 0755);
    size_t big = 64u << 20;
    char *data = calloc(1, big);
    assert_non_null(data);
    put_file(pathf("%s/big", src), data, big, 0644);
    free(data);
    char *out = strdup(pathf("%s/out.tar.gz", dir));
    struct toucher t = {.path = strdup(pathf("%s/big", src))};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, toucher_run, &t), 0);
    struct sl_error err = {0};
    int rc = archive_dir(src, out, NULL, NULL, &err);
    t.stop = true;
    pthread_join(th, NULL);
    assert_int_equal(rc, -1);
    assert_string_equal(err.message, "template source changed during snapshot");
    assert_false(exists(out));
    free((char *)t.path);
    free(src);
    free(out);
}

/* ------------------------------------------------------------------------ */
/* Extraction cases                                                          */

static void extract_round_trip(void **state)
{
    (void)state;
    const char *dir = case_dir();
    char *src = strdup(pathf("%s/src", dir));
    put_dir(src, 0755);
    build_tree(src);
    put_text(pathf("%s/groupw", src), "gw", 0664);
    put_dir(pathf("%s/sgid", src), 02775);
    put_dir(pathf("%s/ro", src), 0500);
    char *tgz = strdup(pathf("%s/t.tar.gz", dir));
    struct sl_tpl_archive_info info = {0};
    must_archive(src, tgz, &info);

    char *dest = strdup(pathf("%s/dest", dir));
    struct sl_error err = {0};
    if (sl_tpl_extract(tgz, "rt", info.digest, dest, 1 << 20, &err) != 0)
        fail_msg("extract: %s", sl_error_text(&err));
    struct stat st;
    assert_int_equal(lstat(dest, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(st.st_mode & 07777, 0755);
    compare_trees(src, dest, true);
    /* Spot checks of the sanitising. */
    assert_int_equal(lstat(pathf("%s/bin/suid", dest), &st), 0);
    assert_int_equal(st.st_mode & 07777, 0755);
    assert_int_equal(lstat(pathf("%s/groupw", dest), &st), 0);
    assert_int_equal(st.st_mode & 07777, 0644);
    assert_int_equal(lstat(pathf("%s/empty", dest), &st), 0);
    assert_int_equal(st.st_mode & 07777, 0755);
    assert_int_equal(lstat(pathf("%s/sgid", dest), &st), 0);
    assert_int_equal(st.st_mode & 07777, 0755);
    assert_int_equal(lstat(pathf("%s/ro", dest), &st), 0);
    assert_int_equal(st.st_mode & 07777, 0555);
    assert_int_equal(lstat(pathf("%s/a/z", dest), &st), 0);
    assert_int_equal(st.st_mtim.tv_sec, 0);

    /* Archiving the extracted tree (modes aside) gives the same members. */
    char *again = strdup(pathf("%s/again.tar.gz", dir));
    assert_int_equal(chmod(pathf("%s/bin/suid", dest), 04755), 0);
    assert_int_equal(chmod(pathf("%s/groupw", dest), 0664), 0);
    assert_int_equal(chmod(pathf("%s/empty", dest), 0700), 0);
    assert_int_equal(chmod(pathf("%s/sgid", dest), 02775), 0);
    assert_int_equal(chmod(pathf("%s/ro", dest), 0500), 0);
    assert_int_equal(chmod(pathf("%s/bin", dest), 0751), 0);
    struct sl_tpl_archive_info info2 = {0};
    must_archive(dest, again, &info2);
    assert_string_equal(info.digest, info2.digest);

    /* The destination must not exist yet. */
    assert_int_equal(sl_tpl_extract(tgz, "rt", info.digest, dest, 0, &err), -1);
    assert_string_equal(err.code, SL_E_INTERNAL);
    assert_int_equal(err.errnum, EEXIST);
    assert_true(exists(pathf("%s/a/z", dest))); /* and is left alone */

    /* Over the extraction bound (member sizes), with the spec's sentence. */
    char *small = strdup(pathf("%s/small", dir));
    assert_int_equal(sl_tpl_extract(tgz, "rt", info.digest, small, 1000, &err), -1);
    assert_string_equal(err.code, SL_E_INVALID_ARGUMENT);
    assert_string_equal(err.message,
                        "template expands to more than 1000 bytes; refusing to extract");
    assert_false(exists(small));
    free(small);
    free(src);
    free(tgz);
    free(dest);
    free(again);
}

static void extract_digest_mismatch(void **state)
{
    (void)state;
    const char *dir = case_dir();
    char *src = strdup(pathf("%s/src", dir));
    put_dir(src, 0755);
    put_text(pathf("%s/f", src), "x", 0644);
    char *tgz = strdup(pathf("%s/t.tar.gz", dir));
    struct sl_tpl_archive_info info = {0};
    must_archive(src, tgz, &info);
    const char *wrong = "sha256:0000000000000000000000000000000000000000000000000000000000000000";
    char *dest = strdup(pathf("%s/dest", dir));
    struct sl_error err = {0};
    assert_int_equal(sl_tpl_extract(tgz, "python-ml", wrong, dest, 0, &err), -1);
    assert_string_equal(err.code, SL_E_INVALID_ARGUMENT);
    assert_string_equal(
        err.message,
        pathf("template python-ml digest mismatch: expected %s, got %s", wrong, info.digest));
    assert_false(exists(dest));

    /* A changed archive no longer matches the digest it was published as. */
    int fd = open(tgz, O_WRONLY | O_APPEND | O_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "!", 1), 1);
    close(fd);
    assert_int_equal(sl_tpl_extract(tgz, "python-ml", info.digest, dest, 0, &err), -1);
    assert_non_null(strstr(err.message, "template python-ml digest mismatch: expected "));
    assert_false(exists(dest));
    free(src);
    free(tgz);
    free(dest);
}

static void extract_refuses_bad_names(void **state)
{
    (void)state;
    char outside[PATH_MAX];
    snprintf(outside, sizeof(outside), "%s/outside-%d", base, getpid());
    const struct craft abs[] = {{.name = "ok", .data = "fine"}, {.name = outside, .data = "pwned"}};
    expect_refused(abs, 2, 0, MSG_ABS);
    assert_false(exists(outside));

    const struct craft up[] = {{.name = "../escaped", .data = "pwned"}};
    expect_refused(up, 1, 0, MSG_ESCAPE);
    const struct craft up2[] = {{.name = "a/", .type = AE_IFDIR, .perm = 0755},
                                {.name = "a/../../escaped", .data = "pwned"}};
    expect_refused(up2, 2, 0, MSG_ESCAPE);
    assert_false(exists(pathf("%s/escaped", base)));
    for (int i = 1; i <= case_no; i++)
        assert_false(exists(pathf("%s/%d/escaped", base, i)));

    /* ".." that stays inside is only a spelling. */
    const char *dir = case_dir();
    const struct craft inside[] = {{.name = "a/../b", .data = "inside"}};
    struct sl_error err = {0};
    if (extract_crafted(dir, inside, 1, 0, &err) != 0)
        fail_msg("refused: %s", sl_error_text(&err));
    assert_true(exists(pathf("%s/out/b", dir)));
}

static void extract_refuses_escaping_links(void **state)
{
    (void)state;
    const struct craft sym[] = {{.name = "l", .type = AE_IFLNK, .linkname = "../outside"}};
    expect_refused(sym, 1, 0, MSG_SYMLINK);
    const struct craft sym2[] = {{.name = "a/", .type = AE_IFDIR, .perm = 0755},
                                 {.name = "a/l", .type = AE_IFLNK, .linkname = "x/../../../etc"}};
    expect_refused(sym2, 2, 0, MSG_SYMLINK);

    /* Relative links that stay inside, and absolute ones, are fine. */
    const char *dir = case_dir();
    const struct craft ok[] = {{.name = "a/", .type = AE_IFDIR, .perm = 0755},
                               {.name = "a/up", .type = AE_IFLNK, .linkname = "../b"},
                               {.name = "a/abs", .type = AE_IFLNK, .linkname = "/etc/passwd"},
                               {.name = "b", .data = "b"}};
    struct sl_error err = {0};
    if (extract_crafted(dir, ok, 4, 0, &err) != 0)
        fail_msg("refused: %s", sl_error_text(&err));
    char target[PATH_MAX];
    ssize_t n = readlink(pathf("%s/out/a/abs", dir), target, sizeof(target));
    assert_int_equal(n, 11);
    assert_memory_equal(target, "/etc/passwd", 11);

    /* An absolute link is never followed: a member through it is refused
     * and nothing lands where it points. */
    char *victim = strdup(pathf("%s/victim", case_dir()));
    put_dir(victim, 0755);
    const struct craft through[] = {{.name = "d", .type = AE_IFLNK, .linkname = victim},
                                    {.name = "d/pwned", .data = "pwned"}};
    expect_refused(through, 2, 0, MSG_ESCAPE);
    assert_false(exists(pathf("%s/pwned", victim)));
    const struct craft through_dir[] = {{.name = "d", .type = AE_IFLNK, .linkname = victim},
                                        {.name = "d/sub/", .type = AE_IFDIR, .perm = 0755}};
    expect_refused(through_dir, 2, 0, MSG_ESCAPE);
    assert_false(exists(pathf("%s/sub", victim)));
    /* Nor is a link replaced by a file followed. */
    const struct craft replace[] = {{.name = "d", .type = AE_IFLNK, .linkname = victim},
                                    {.name = "d", .data = "now a file"}};
    dir = case_dir();
    if (extract_crafted(dir, replace, 2, 0, &err) != 0)
        fail_msg("refused: %s", sl_error_text(&err));
    struct stat st;
    assert_int_equal(lstat(pathf("%s/out/d", dir), &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_int_equal(lstat(victim, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    free(victim);

    /* Hard links: absolute, escaping, or to a symlink. */
    const struct craft hl_abs[] = {{.name = "h", .hardlink = "/etc/passwd"}};
    expect_refused(hl_abs, 1, 0, MSG_HARDLINK);
    const struct craft hl_up[] = {{.name = "h", .hardlink = "../../etc/passwd"}};
    expect_refused(hl_up, 1, 0, MSG_HARDLINK);
    const struct craft hl_sym[] = {{.name = "a/", .type = AE_IFDIR, .perm = 0755},
                                   {.name = "a/l", .type = AE_IFLNK, .linkname = "../x"},
                                   {.name = "h", .hardlink = "a/l"}};
    expect_refused(hl_sym, 3, 0, MSG_HARDLINK);
    const struct craft hl_through[] = {{.name = "d", .type = AE_IFLNK, .linkname = "/etc"},
                                       {.name = "h", .hardlink = "d/passwd"}};
    expect_refused(hl_through, 2, 0, MSG_HARDLINK);
    const struct craft hl_missing[] = {{.name = "h", .hardlink = "nothing"}};
    expect_refused(hl_missing, 1, 0, MSG_HARDLINK);

    /* A hard link to a file of the archive works. */
    dir = case_dir();
    const struct craft hl_ok[] = {{.name = "f", .data = "shared"}, {.name = "g", .hardlink = "f"}};
    if (extract_crafted(dir, hl_ok, 2, 0, &err) != 0)
        fail_msg("refused: %s", sl_error_text(&err));
    struct stat a, b;
    assert_int_equal(lstat(pathf("%s/out/f", dir), &a), 0);
    assert_int_equal(lstat(pathf("%s/out/g", dir), &b), 0);
    assert_int_equal(a.st_ino, b.st_ino);
}

static void extract_refuses_special_files(void **state)
{
    (void)state;
    const struct craft chr[] = {{.name = "ok", .data = "x"},
                                {.name = "null", .type = AE_IFCHR, .perm = 0666}};
    expect_refused(chr, 2, 0, MSG_SPECIAL);
    const struct craft blk[] = {{.name = "sda", .type = AE_IFBLK, .perm = 0660}};
    expect_refused(blk, 1, 0, MSG_SPECIAL);
    const struct craft fifo[] = {{.name = "pipe", .type = AE_IFIFO, .perm = 0644}};
    expect_refused(fifo, 1, 0, MSG_SPECIAL);
}

static void extract_strips_modes(void **state)
{
    (void)state;
    const char *dir = case_dir();
    const struct craft items[] = {
        {.name = "d/", .type = AE_IFDIR, .perm = 02777},
        {.name = "d/suid", .data = "s", .perm = 04755},
        {.name = "d/sgid", .data = "s", .perm = 02711},
        {.name = "d/open", .data = "s", .perm = 0666},
        {.name = "d/private", .data = "s", .perm = 0600},
        {.name = "closed/", .type = AE_IFDIR, .perm = 0700},
        {.name = "implicit/x/f", .data = "s", .perm = 0644},
    };
    struct sl_error err = {0};
    mode_t old = umask(077); /* the modes must not depend on it */
    int rc = extract_crafted(dir, items, SL_ARRAY_LEN(items), 0, &err);
    umask(old);
    if (rc != 0)
        fail_msg("refused: %s", sl_error_text(&err));
    const struct {
        const char *name;
        mode_t mode;
    } want[] = {
        {"d", 0755},        {"d/suid", 0755},     {"d/sgid", 0711},
        {"d/open", 0644},   {"d/private", 0600},  {"closed", 0755},
        {"implicit", 0755}, {"implicit/x", 0755}, {"implicit/x/f", 0644},
    };
    for (size_t i = 0; i < SL_ARRAY_LEN(want); i++) {
        struct stat st;
        assert_int_equal(lstat(pathf("%s/out/%s", dir, want[i].name), &st), 0);
        if ((st.st_mode & 07777) != want[i].mode)
            fail_msg("%s: mode %o, want %o", want[i].name, st.st_mode & 07777, want[i].mode);
    }
}

/* A member of zeros (a sparse file's archive) stays sparse: its size is
 * kept, its blocks are not written, and it does not count against the
 * extraction limit (hardening issue, 14). */
static void extract_keeps_holes(void **state)
{
    (void)state;
    const char *dir = case_dir();
    const struct craft items[] = {{.name = "sparse", .size = 8 * 1024 * 1024},
                                  {.name = "data", .data = "0123456789"}};
    struct sl_error err = {0};
    if (extract_crafted(dir, items, 2, 1024 * 1024, &err) != 0)
        fail_msg("refused: %s", sl_error_text(&err));
    struct stat st;
    assert_int_equal(stat(pathf("%s/out/sparse", dir), &st), 0);
    assert_int_equal(st.st_size, 8 * 1024 * 1024);
    assert_true(st.st_blocks * 512 <= 64 * 1024);
    assert_int_equal(stat(pathf("%s/out/data", dir), &st), 0);
    assert_int_equal(st.st_size, 10);
}

/* The sweep of templates/catalog.c: trees nothing references (not the
 * published revision, not mounted) go once past the grace; so do the kept
 * archives of unpublished names; a fresh tree stays. */
static bool keep_published(const char *name, const char *hex, const char *tree, void *arg)
{
    (void)arg;
    if (strstr(tree ? tree : "", "mounted"))
        return true;
    if (strcmp(name, "pub") != 0)
        return false;
    return !hex || strcmp(hex, "aaaa") == 0;
}

static void age(const char *path)
{
    struct timespec old[2] = {{.tv_sec = time(NULL) - 3600}, {.tv_sec = time(NULL) - 3600}};
    assert_int_equal(utimensat(AT_FDCWD, path, old, 0), 0);
}

static void sweep_removes_unreferenced_trees(void **state)
{
    (void)state;
    const char *root = case_dir();
    const char *dirs[] = {"pub", "pub/sha256-aaaa", "pub/sha256-bbbb", "gone", "gone/sha256-cccc",
                          "gone/sha256-mounted", "fresh", "fresh/sha256-dddd", ".archives",
                          ".archives/pub", ".archives/gone"};
    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++)
        put_dir(pathf("%s/%s", root, dirs[i]), 0755);
    put_text(pathf("%s/gone/sha256-cccc/f", root), "x", 0644);
    const char *old[] = {"pub/sha256-aaaa", "pub/sha256-bbbb", "gone/sha256-cccc",
                         "gone/sha256-mounted", ".archives/pub", ".archives/gone"};
    for (size_t i = 0; i < sizeof(old) / sizeof(old[0]); i++)
        age(pathf("%s/%s", root, old[i]));
    struct sl_error err = {0};
    int n = sl_tpl_sweep_unreferenced(root, keep_published, NULL, &err);
    assert_int_equal(n, 3); /* pub's old revision, gone's unmounted tree, gone's archives */
    assert_true(exists(pathf("%s/pub/sha256-aaaa", root)));
    assert_false(exists(pathf("%s/pub/sha256-bbbb", root)));
    assert_false(exists(pathf("%s/gone/sha256-cccc", root)));
    assert_true(exists(pathf("%s/gone/sha256-mounted", root)));
    assert_true(exists(pathf("%s/fresh/sha256-dddd", root))); /* within the grace */
    assert_true(exists(pathf("%s/.archives/pub", root)));
    assert_false(exists(pathf("%s/.archives/gone", root)));
}

static void extract_refuses_oversize(void **state)
{
    (void)state;
    /* Only data counts (zero blocks become holes): members of 100 and 60 bytes. */
    static const char d100[] = "0123456789012345678901234567890123456789012345678901234567890123456789"
                               "012345678901234567890123456789";
    static const char d60[] = "012345678901234567890123456789012345678901234567890123456789";
    const struct craft one[] = {{.name = "big", .data = d100}};
    expect_refused(one, 1, 99, "template expands to more than 99 bytes; refusing to extract");
    const struct craft sum[] = {{.name = "a", .data = d60}, {.name = "b", .data = d60}};
    expect_refused(sum, 2, 100, "template expands to more than 100 bytes; refusing to extract");
    const char *dir = case_dir();
    struct sl_error err = {0};
    if (extract_crafted(dir, sum, 2, 120, &err) != 0)
        fail_msg("refused: %s", sl_error_text(&err));
}

static void extract_refuses_corrupt(void **state)
{
    (void)state;
    const char *dir = case_dir();
    char *tgz = strdup(pathf("%s/t.tar.gz", dir));
    const struct craft items[] = {{.name = "f", .size = 200000}};
    craft_archive(tgz, items, 1);
    struct stat st;
    assert_int_equal(stat(tgz, &st), 0);
    assert_int_equal(truncate(tgz, st.st_size / 2), 0);
    char digest[SL_TPL_DIGEST_SIZE];
    sha256_file(tgz, digest);
    struct sl_error err = {0};
    assert_int_equal(sl_tpl_extract(tgz, "c", digest, pathf("%s/out", dir), 0, &err), -1);
    assert_string_equal(err.code, SL_E_INVALID_ARGUMENT);
    assert_string_equal(err.message, "template archive is not a valid tar.gz archive");
    assert_false(exists(pathf("%s/out", dir)));
    free(tgz);
}

static int setup(void **state)
{
    (void)state;
    return mkdtemp(base) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    rm_rf(base);
    return 0;
}

/* A template's stored name: a public one's plain name, or a tenant's
 * "<tenant>~<name>" (templates/catalog.h); nothing else. */
static void stored_names_are_plain_or_one_owner_and_a_plain_name(void **state)
{
    (void)state;
    struct sl_error err;
    static const char *const good[] = {"py", "acme~py", "a-1~py.3_x", "0~0"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        sl_error_clear(&err);
        assert_int_equal(sl_tpl_stored_name_check(good[i], &err), 0);
    }
    static const char *const bad[] = {"", "~py", "acme~", "acme~~py", "a~b~c", "Acme~py",
                                      "acme_x~py", "acme~..", "acme~.", "acme~Py",
                                      "012345678901234567890123456789012~py", "acme~/x"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        sl_error_clear(&err);
        assert_int_equal(sl_tpl_stored_name_check(bad[i], &err), -1);
        assert_string_equal(err.code, SL_E_INVALID_ARGUMENT);
    }
    /* The longest: 32 characters of owner, 64 of name. */
    char longest[SL_TPL_STORED_NAME_MAX + 2];
    memset(longest, 'a', 32);
    longest[32] = '~';
    memset(longest + 33, 'b', 64);
    longest[97] = '\0';
    assert_int_equal(sl_tpl_stored_name_check(longest, &err), 0);
    assert_string_equal(sl_tpl_plain_name(longest), longest + 33);
    assert_string_equal(sl_tpl_plain_name("py"), "py");
    assert_string_equal(sl_tpl_plain_name("acme~py"), "py");
    longest[97] = 'b';
    longest[98] = '\0';
    assert_int_equal(sl_tpl_stored_name_check(longest, &err), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(stored_names_are_plain_or_one_owner_and_a_plain_name),
        cmocka_unit_test(archive_is_deterministic),
        cmocka_unit_test(archive_members_and_metadata),
        cmocka_unit_test(archive_refuses_special_files),
        cmocka_unit_test(archive_limits),
        cmocka_unit_test(archive_detects_changes),
        cmocka_unit_test(extract_round_trip),
        cmocka_unit_test(extract_digest_mismatch),
        cmocka_unit_test(extract_refuses_bad_names),
        cmocka_unit_test(extract_refuses_escaping_links),
        cmocka_unit_test(extract_refuses_special_files),
        cmocka_unit_test(extract_strips_modes),
        cmocka_unit_test(extract_keeps_holes),
        cmocka_unit_test(sweep_removes_unreferenced_trees),
        cmocka_unit_test(extract_refuses_oversize),
        cmocka_unit_test(extract_refuses_corrupt),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
