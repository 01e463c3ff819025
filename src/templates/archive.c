/* Deterministic template archives and their safe extraction
 * (spec API.md §6.3, §6.4). See archive.h for the contract. */
#include "templates/archive.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <locale.h>
#include <openssl/evp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"

#define IO_CHUNK (64 * 1024)

#define MSG_SPECIAL "template source contains an unsupported special file"
#define MSG_CHANGED "template source changed during snapshot"
#define MSG_ENTRIES "template snapshot exceeded its entry limit"
#define MSG_DEPTH "template snapshot exceeded its depth limit"
#define MSG_SOURCE_BYTES "template snapshot exceeded its source byte limit"
#define MSG_TIME "template snapshot exceeded its time limit"

#define MSG_X_CORRUPT "template archive is not a valid tar.gz archive"
#define MSG_X_ABSOLUTE "template archive contains an absolute member name"
#define MSG_X_ESCAPE "template archive contains a member that escapes the destination"
#define MSG_X_SYMLINK "template archive contains a symlink that escapes the destination"
#define MSG_X_HARDLINK                                                                             \
    "template archive contains a hard link that is absolute or escapes the destination"
#define MSG_X_SPECIAL "template archive contains a device, FIFO or other special file"
#define MSG_X_DEEP "template archive contains a member nested too deeply"
#define MSG_X_CONFLICT "template archive contains conflicting members"

static void evp_md_ctx_freep(EVP_MD_CTX **c)
{
    EVP_MD_CTX_free(*c);
}
static void archive_freep(struct archive **a)
{
    if (*a)
        archive_free(*a);
}
static void entry_freep(struct archive_entry **e)
{
    if (*e)
        archive_entry_free(*e);
}
#define _cleanup_md_ __attribute__((cleanup(evp_md_ctx_freep)))
#define _cleanup_archive_ __attribute__((cleanup(archive_freep)))
#define _cleanup_entry_ __attribute__((cleanup(entry_freep)))

/* ------------------------------------------------------------------------ */
/* Small helpers                                                             */

static int refuse(struct sl_error *err, const char *msg, const char *member)
{
    sl_error_set(err, SL_E_INVALID_ARGUMENT, 0, "%s", msg);
    if (member)
        sl_error_wrap(err, "member '%.200s'", member);
    return -1;
}

static int write_all(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len > 0) {
        ssize_t n = SL_RETRY(write(fd, p, len));
        if (n < 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static void digest_format(const unsigned char md[32], char out[SL_TPL_DIGEST_SIZE])
{
    static const char hex[] = "0123456789abcdef";
    memcpy(out, "sha256:", 7);
    for (int i = 0; i < 32; i++) {
        out[7 + 2 * i] = hex[md[i] >> 4];
        out[7 + 2 * i + 1] = hex[md[i] & 15];
    }
    out[71] = '\0';
}

static int digest_final(EVP_MD_CTX *md, char out[SL_TPL_DIGEST_SIZE])
{
    unsigned char raw[EVP_MAX_MD_SIZE];
    unsigned int rawlen = 0;
    if (EVP_DigestFinal_ex(md, raw, &rawlen) != 1 || rawlen != 32)
        return -1;
    digest_format(raw, out);
    return 0;
}

/* A growable member name built while walking ("a/b/c"). */
struct relpath {
    char *s;
    size_t len, cap;
};

static int relpath_push(struct relpath *p, const char *name, size_t *saved)
{
    size_t nl = strlen(name);
    size_t need = p->len + (p->len ? 1 : 0) + nl + 1;
    if (need > p->cap) {
        size_t cap = p->cap ? p->cap : 256;
        while (cap < need)
            cap *= 2;
        char *s = realloc(p->s, cap);
        if (!s)
            return -1;
        p->s = s;
        p->cap = cap;
    }
    *saved = p->len;
    if (p->len)
        p->s[p->len++] = '/';
    memcpy(p->s + p->len, name, nl + 1);
    p->len += nl;
    return 0;
}

static void relpath_pop(struct relpath *p, size_t saved)
{
    p->len = saved;
    p->s[saved] = '\0';
}

/* libarchive converts member names between the locale's charset and the
 * UTF-8 of pax records, so the bytes of an archive would depend on the
 * locale of the calling thread. Both directions run under the C locale,
 * which every host has: an ASCII name stays a plain ustar name, any other
 * name is stored as its raw bytes (hdrcharset=BINARY) and read back as
 * the raw bytes of its pax record. */
struct locale_pin {
    locale_t c, old;
};

static void locale_pin_c(struct locale_pin *p)
{
    p->c = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    p->old = p->c ? uselocale(p->c) : (locale_t)0;
}

static void locale_unpin(struct locale_pin *p)
{
    if (p->c) {
        uselocale(p->old);
        freelocale(p->c);
        p->c = (locale_t)0;
    }
}

/* ------------------------------------------------------------------------ */
/* Archive                                                                   */

struct snap {
    struct archive *a;
    struct archive_entry *entry;
    const struct sl_tpl_limits *lim;
    struct sl_error *err;
    int64_t deadline_us; /* 0: none */
    int64_t entries;
    int64_t source_bytes;
    struct relpath path;
    char *buf; /* IO_CHUNK bytes */
    /* Output side, driven by libarchive's write callback. */
    int out_fd;
    EVP_MD_CTX *md;
    int64_t out_bytes;
    bool over_archive_limit;
    bool aborted; /* an error is set: drop whatever libarchive still flushes */
    int out_errno;
};

static la_ssize_t snap_out_write(struct archive *a, void *ctx, const void *data, size_t len)
{
    struct snap *s = ctx;
    if (s->aborted) {
        archive_set_error(a, ECANCELED, "snapshot aborted");
        return -1;
    }
    if (s->lim->max_archive_bytes > 0 && s->out_bytes + (int64_t)len > s->lim->max_archive_bytes) {
        s->over_archive_limit = true;
        archive_set_error(a, EFBIG, "archive over its byte limit");
        return -1;
    }
    if (write_all(s->out_fd, data, len) < 0) {
        s->out_errno = errno;
        archive_set_error(a, errno, "write failed");
        return -1;
    }
    if (EVP_DigestUpdate(s->md, data, len) != 1) {
        s->out_errno = EIO;
        archive_set_error(a, EIO, "digest failed");
        return -1;
    }
    s->out_bytes += (int64_t)len;
    return (la_ssize_t)len;
}

/* A libarchive write call failed: our own limit, the output file, or
 * libarchive itself. */
static int snap_archive_failed(struct snap *s)
{
    s->aborted = true;
    if (s->over_archive_limit)
        return sl_error_set(s->err, SL_E_INVALID_ARGUMENT, 0,
                            "template archive is over the %" PRId64 " byte limit",
                            s->lim->max_archive_bytes);
    if (s->out_errno) {
        errno = s->out_errno;
        return sl_error_errno(s->err, SL_E_INTERNAL, "template archive could not be written");
    }
    sl_error_set(s->err, SL_E_INTERNAL, archive_errno(s->a),
                 "template archive could not be written");
    const char *why = archive_error_string(s->a);
    return sl_error_wrap(s->err, "libarchive: %s", why ? why : "unknown error");
}

static int snap_fail(struct snap *s, const char *msg)
{
    s->aborted = true;
    return refuse(s->err, msg, s->path.len ? s->path.s : NULL);
}

static int snap_fail_errno(struct snap *s, const char *what)
{
    s->aborted = true;
    sl_error_errno(s->err, SL_E_INTERNAL, "template source could not be read");
    return sl_error_wrap(s->err, "%s '%.200s'", what, s->path.len ? s->path.s : ".");
}

static int snap_check_time(struct snap *s)
{
    if (s->deadline_us && sl_mono_us() > s->deadline_us)
        return snap_fail(s, MSG_TIME);
    return 0;
}

static bool same_identity(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino &&
           (a->st_mode & S_IFMT) == (b->st_mode & S_IFMT);
}

static bool same_version(const struct stat *a, const struct stat *b)
{
    return a->st_size == b->st_size && a->st_mtim.tv_sec == b->st_mtim.tv_sec &&
           a->st_mtim.tv_nsec == b->st_mtim.tv_nsec && a->st_ctim.tv_sec == b->st_ctim.tv_sec &&
           a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

static bool unchanged(const struct stat *a, const struct stat *b)
{
    return same_identity(a, b) && same_version(a, b);
}

/* An entry vanished or turned into something else between listing and use. */
static bool errno_means_changed(int e)
{
    return e == ENOENT || e == ENOTDIR || e == ELOOP || e == ENXIO;
}

/* Metadata exactly as §6.3 says: permission bits kept, everything else that
 * could differ between two snapshots of one tree fixed (owners 0, names
 * empty, mtime 0, no atime/ctime: a fresh entry leaves them unset, so the
 * pax writer adds no time records). */
static int snap_write_header(struct snap *s, mode_t type, mode_t mode, int64_t size,
                             const char *symlink)
{
    struct archive_entry *e = archive_entry_clear(s->entry);
    archive_entry_copy_pathname(e, s->path.s);
    archive_entry_set_filetype(e, type);
    archive_entry_set_perm(e, mode & 07777);
    archive_entry_set_size(e, size);
    archive_entry_set_uid(e, 0);
    archive_entry_set_gid(e, 0);
    archive_entry_set_mtime(e, 0, 0);
    if (symlink)
        archive_entry_copy_symlink(e, symlink);
    /* WARN: a name not valid in the (pinned C) locale; the pax writer then
     * stores its raw bytes under hdrcharset=BINARY, which is what we want. */
    if (archive_write_header(s->a, e) < ARCHIVE_WARN)
        return snap_archive_failed(s);
    return 0;
}

static int snap_dir(struct snap *s, int dirfd, const struct stat *dir_st, int64_t depth);

static int snap_file(struct snap *s, int dirfd, const char *name, const struct stat *st)
{
    /* What the file really takes: its allocated blocks when they are fewer
     * than its size (a sparse 1000 MB file holds 4 KB, and extraction keeps
     * the hole), else its size. */
    int64_t allocated = (int64_t)st->st_blocks * 512;
    s->source_bytes += allocated < st->st_size ? allocated : st->st_size;
    if (s->lim->max_source_bytes > 0 && s->source_bytes > s->lim->max_source_bytes)
        return snap_fail(s, MSG_SOURCE_BYTES);
    /* O_NONBLOCK: should the name have become a FIFO since the fstatat,
     * the open must not hang; the identity check below then refuses it. */
    _cleanup_close_ int fd =
        openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return errno_means_changed(errno) ? snap_fail(s, MSG_CHANGED) : snap_fail_errno(s, "open");
    struct stat before;
    if (fstat(fd, &before) < 0)
        return snap_fail_errno(s, "fstat");
    if (!unchanged(st, &before))
        return snap_fail(s, MSG_CHANGED);
    if (snap_write_header(s, AE_IFREG, st->st_mode, st->st_size, NULL) < 0)
        return -1;
    int64_t left = st->st_size;
    while (left > 0) {
        if (snap_check_time(s) < 0)
            return -1;
        size_t want = left < IO_CHUNK ? (size_t)left : IO_CHUNK;
        ssize_t n = SL_RETRY(read(fd, s->buf, want));
        if (n < 0)
            return snap_fail_errno(s, "read");
        if (n == 0) /* shrank while we read it */
            return snap_fail(s, MSG_CHANGED);
        if (archive_write_data(s->a, s->buf, (size_t)n) != n)
            return snap_archive_failed(s);
        left -= n;
    }
    struct stat after;
    if (fstat(fd, &after) < 0)
        return snap_fail_errno(s, "fstat");
    if (!unchanged(st, &after))
        return snap_fail(s, MSG_CHANGED);
    return 0;
}

static int snap_symlink(struct snap *s, int dirfd, const char *name, const struct stat *st)
{
    char target[PATH_MAX + 1];
    ssize_t n = readlinkat(dirfd, name, target, sizeof(target));
    if (n < 0)
        return errno_means_changed(errno) || errno == EINVAL ? snap_fail(s, MSG_CHANGED)
                                                             : snap_fail_errno(s, "readlink");
    if ((size_t)n >= sizeof(target) || n != st->st_size)
        return snap_fail(s, MSG_CHANGED);
    target[n] = '\0';
    struct stat after;
    if (fstatat(dirfd, name, &after, AT_SYMLINK_NOFOLLOW) < 0)
        return errno_means_changed(errno) ? snap_fail(s, MSG_CHANGED) : snap_fail_errno(s, "lstat");
    if (!unchanged(st, &after))
        return snap_fail(s, MSG_CHANGED);
    /* The target goes in verbatim, absolute or relative: it is resolved
     * inside the sandbox that mounts the template, never here. */
    return snap_write_header(s, AE_IFLNK, st->st_mode, 0, target);
}

static int snap_subdir(struct snap *s, int dirfd, const char *name, const struct stat *st,
                       int64_t depth)
{
    _cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno_means_changed(errno) ? snap_fail(s, MSG_CHANGED) : snap_fail_errno(s, "open");
    struct stat opened;
    if (fstat(fd, &opened) < 0)
        return snap_fail_errno(s, "fstat");
    if (!unchanged(st, &opened))
        return snap_fail(s, MSG_CHANGED);
    if (snap_write_header(s, AE_IFDIR, st->st_mode, 0, NULL) < 0)
        return -1;
    return snap_dir(s, fd, &opened, depth + 1);
}

static int snap_entry(struct snap *s, int dirfd, const char *name, int64_t depth)
{
    if (snap_check_time(s) < 0)
        return -1;
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return errno_means_changed(errno) ? snap_fail(s, MSG_CHANGED) : snap_fail_errno(s, "lstat");
    if (S_ISDIR(st.st_mode))
        return snap_subdir(s, dirfd, name, &st, depth);
    if (S_ISREG(st.st_mode))
        return snap_file(s, dirfd, name, &st);
    if (S_ISLNK(st.st_mode))
        return snap_symlink(s, dirfd, name, &st);
    return snap_fail(s, MSG_SPECIAL);
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void names_free(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* Read the names of dirfd (its children are at `depth`), counting each
 * against the entry limit as it is read so a huge directory costs nothing
 * beyond the limit. */
static int snap_list(struct snap *s, int dirfd, int64_t depth, char ***out, size_t *count)
{
    *out = NULL;
    *count = 0;
    int lfd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (lfd < 0)
        return snap_fail_errno(s, "open");
    _cleanup_closedir_ DIR *d = fdopendir(lfd);
    if (!d) {
        close(lfd);
        return snap_fail_errno(s, "fdopendir");
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (!de) {
            if (errno) {
                names_free(names, n);
                return snap_fail_errno(s, "readdir");
            }
            break;
        }
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        s->entries++;
        if (s->lim->max_entries > 0 && s->entries > s->lim->max_entries) {
            names_free(names, n);
            return snap_fail(s, MSG_ENTRIES);
        }
        if (snap_check_time(s) < 0) {
            names_free(names, n);
            return -1;
        }
        if (s->lim->max_depth > 0 && depth > s->lim->max_depth) {
            names_free(names, n);
            return snap_fail(s, MSG_DEPTH);
        }
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            char **grown = realloc(names, ncap * sizeof(*names));
            if (!grown) {
                names_free(names, n);
                errno = ENOMEM;
                return snap_fail_errno(s, "list");
            }
            names = grown;
            cap = ncap;
        }
        if (!(names[n] = strdup(de->d_name))) {
            names_free(names, n);
            errno = ENOMEM;
            return snap_fail_errno(s, "list");
        }
        n++;
    }
    /* strcmp orders the raw bytes: the same on every host and locale. */
    if (n > 1)
        qsort(names, n, sizeof(*names), cmp_names);
    *out = names;
    *count = n;
    return 0;
}

/* The directory's own version is checked after listing and again after its
 * subtree is written: a name added, removed or renamed in between changes
 * its mtime/ctime. */
static int snap_dir(struct snap *s, int dirfd, const struct stat *dir_st, int64_t depth)
{
    char **names = NULL;
    size_t n = 0;
    if (snap_list(s, dirfd, depth, &names, &n) < 0)
        return -1;
    int rc = 0;
    struct stat now;
    if (fstat(dirfd, &now) < 0)
        rc = snap_fail_errno(s, "fstat");
    else if (!unchanged(dir_st, &now))
        rc = snap_fail(s, MSG_CHANGED);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        size_t saved;
        if (relpath_push(&s->path, names[i], &saved) < 0) {
            errno = ENOMEM;
            rc = snap_fail_errno(s, "path");
            break;
        }
        rc = snap_entry(s, dirfd, names[i], depth);
        if (rc == 0)
            relpath_pop(&s->path, saved);
    }
    names_free(names, n);
    if (rc < 0)
        return rc;
    if (fstat(dirfd, &now) < 0)
        return snap_fail_errno(s, "fstat");
    if (!unchanged(dir_st, &now))
        return snap_fail(s, MSG_CHANGED);
    return 0;
}

static int snap_open_writer(struct snap *s)
{
    struct archive *a = s->a;
    /* pax_restricted: plain ustar headers unless a name, link or size does
     * not fit, so no pax time records. */
    if (archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
        archive_write_add_filter_gzip(a) != ARCHIVE_OK ||
        archive_write_set_filter_option(a, "gzip", "compression-level", "6") != ARCHIVE_OK ||
        /* "!timestamp": header mtime 0; libarchive never writes a name. */
        archive_write_set_filter_option(a, "gzip", "timestamp", NULL) != ARCHIVE_OK ||
        /* No zero padding after the gzip trailer. */
        archive_write_set_bytes_in_last_block(a, 1) != ARCHIVE_OK ||
        archive_write_open2(a, s, NULL, snap_out_write, NULL, NULL) != ARCHIVE_OK) {
        sl_error_set(s->err, SL_E_INTERNAL, archive_errno(a),
                     "template archive could not be written");
        const char *why = archive_error_string(a);
        return sl_error_wrap(s->err, "libarchive setup: %s", why ? why : "unknown error");
    }
    return 0;
}

static int tpl_archive(int src_dirfd, const char *out_path, const struct sl_tpl_limits *lim,
                       struct sl_tpl_archive_info *info, struct sl_error *err)
{
    static const struct sl_tpl_limits no_limits = {0};
    if (!lim)
        lim = &no_limits;
    struct snap s = {.lim = lim, .err = err, .out_fd = -1};
    if (lim->timeout_seconds > 0)
        s.deadline_us = sl_mono_us() + (int64_t)(lim->timeout_seconds * 1e6);

    struct stat root_st;
    if (fstat(src_dirfd, &root_st) < 0)
        return sl_error_errno(err, SL_E_INTERNAL, "template source could not be read");
    if (!S_ISDIR(root_st.st_mode)) {
        errno = ENOTDIR;
        return sl_error_errno(err, SL_E_INTERNAL, "template source could not be read");
    }

    _cleanup_close_ int out_fd =
        open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (out_fd < 0) {
        sl_error_errno(err, SL_E_INTERNAL, "template archive could not be written");
        return sl_error_wrap(err, "open %s", out_path);
    }
    s.out_fd = out_fd;

    _cleanup_md_ EVP_MD_CTX *md = EVP_MD_CTX_new();
    _cleanup_free_ char *buf = malloc(IO_CHUNK);
    _cleanup_archive_ struct archive *a = archive_write_new();
    _cleanup_entry_ struct archive_entry *entry = archive_entry_new();
    int rc = -1;
    if (!md || !buf || !a || !entry || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) {
        errno = ENOMEM;
        sl_error_errno(err, SL_E_INTERNAL, "template archive could not be written");
        goto out;
    }
    s.md = md;
    s.buf = buf;
    s.a = a;
    s.entry = entry;
    if (snap_open_writer(&s) < 0)
        goto out;
    if (snap_dir(&s, src_dirfd, &root_st, 1) < 0)
        goto out;
    if (archive_write_close(a) != ARCHIVE_OK) {
        snap_archive_failed(&s);
        goto out;
    }
    if (close(steal_fd(out_fd)) < 0) {
        sl_error_errno(err, SL_E_INTERNAL, "template archive could not be written");
        sl_error_wrap(err, "close %s", out_path);
        goto out;
    }
    if (info) {
        if (digest_final(md, info->digest) < 0) {
            sl_error_set(err, SL_E_INTERNAL, 0, "template archive could not be written");
            goto out;
        }
        info->size_bytes = s.out_bytes;
        info->entries = s.entries;
        info->source_bytes = s.source_bytes;
    }
    rc = 0;
out:
    free(s.path.s);
    if (rc < 0) {
        s.aborted = true; /* archive_free() may still try to flush */
        if (a)
            archive_free(steal_ptr(a));
        if (out_fd >= 0)
            close(steal_fd(out_fd));
        unlink(out_path);
    }
    return rc;
}

int sl_tpl_archive(int src_dirfd, const char *out_path, const struct sl_tpl_limits *lim,
                   struct sl_tpl_archive_info *info, struct sl_error *err)
{
    struct locale_pin pin;
    locale_pin_c(&pin);
    int rc = tpl_archive(src_dirfd, out_path, lim, info, err);
    locale_unpin(&pin);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Digest                                                                    */

static int digest_fd(int fd, char out[SL_TPL_DIGEST_SIZE], struct sl_error *err)
{
    _cleanup_md_ EVP_MD_CTX *md = EVP_MD_CTX_new();
    _cleanup_free_ char *buf = malloc(IO_CHUNK);
    if (!md || !buf || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) {
        errno = ENOMEM;
        return sl_error_errno(err, SL_E_INTERNAL, "template archive could not be read");
    }
    for (;;) {
        ssize_t n = SL_RETRY(read(fd, buf, IO_CHUNK));
        if (n < 0)
            return sl_error_errno(err, SL_E_INTERNAL, "template archive could not be read");
        if (n == 0)
            break;
        if (EVP_DigestUpdate(md, buf, (size_t)n) != 1)
            return sl_error_set(err, SL_E_INTERNAL, 0, "template archive could not be read");
    }
    if (digest_final(md, out) < 0)
        return sl_error_set(err, SL_E_INTERNAL, 0, "template archive could not be read");
    return 0;
}

int sl_tpl_digest_file(const char *path, char digest[SL_TPL_DIGEST_SIZE], struct sl_error *err)
{
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        sl_error_errno(err, SL_E_INTERNAL, "template archive could not be read");
        return sl_error_wrap(err, "open %s", path);
    }
    if (digest_fd(fd, digest, err) < 0)
        return sl_error_wrap(err, "read %s", path);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Extraction                                                                */

/* A member name split into components, "." and empty ones dropped and ".."
 * applied lexically. Components point into `buf`. */
struct comps {
    char *buf;
    const char **v;
    size_t n;
};

static void comps_free(struct comps *c)
{
    free(c->buf);
    free(c->v);
    c->buf = NULL;
    c->v = NULL;
    c->n = 0;
}

/* Returns 0, 1 if the name climbs above the destination, -1 on ENOMEM. */
static int comps_split(const char *name, struct comps *c)
{
    comps_free(c);
    c->buf = strdup(name);
    size_t max = 1;
    for (const char *p = name; *p; p++)
        max += *p == '/';
    c->v = calloc(max, sizeof(*c->v));
    if (!c->buf || !c->v)
        return -1;
    char *save = NULL;
    for (char *tok = strtok_r(c->buf, "/", &save); tok; tok = strtok_r(NULL, "/", &save)) {
        if (strcmp(tok, ".") == 0)
            continue;
        if (strcmp(tok, "..") == 0) {
            if (c->n == 0)
                return 1;
            c->n--;
            continue;
        }
        c->v[c->n++] = tok;
    }
    return 0;
}

/* Does a relative symlink target, read from the directory holding the link
 * (`parent_depth` components below the destination), climb above it?
 * Lexical, as §6.4 asks: every ".." is counted where it stands. */
static bool symlink_escapes(const char *target, size_t parent_depth)
{
    int64_t depth = (int64_t)parent_depth;
    const char *p = target;
    while (*p) {
        const char *end = strchr(p, '/');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == 2 && p[0] == '.' && p[1] == '.') {
            if (--depth < 0)
                return true;
        } else if (len > 0 && !(len == 1 && p[0] == '.')) {
            depth++;
        }
        if (!end)
            break;
        p = end + 1;
    }
    return false;
}

struct extract {
    struct archive *a;
    int root_fd;
    int64_t max_bytes;
    int64_t total;
    struct sl_error *err;
    const char *member;
    char *buf;
    /* The last parent directory opened: archives list siblings together. */
    char *cached_parent;
    int cached_fd;
};

static int x_refuse(struct extract *x, const char *msg)
{
    return refuse(x->err, msg, x->member);
}

static int x_errno(struct extract *x, const char *what)
{
    sl_error_errno(x->err, SL_E_INTERNAL, "template could not be extracted");
    return sl_error_wrap(x->err, "%s '%.200s'", what, x->member ? x->member : "");
}

/* Open (creating 0755 where missing) the directory made of the first n
 * components, one no-follow step at a time from the destination. A
 * component that is a symlink or a file stops the walk: a member never
 * lands outside through a link an earlier member planted. */
static int x_open_dir(struct extract *x, const struct comps *c, size_t n)
{
    int fd = fcntl(x->root_fd, F_DUPFD_CLOEXEC, 3);
    if (fd < 0)
        return x_errno(x, "dup");
    for (size_t i = 0; i < n; i++) {
        int next = openat(fd, c->v[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        bool created = false;
        if (next < 0 && errno == ENOENT) {
            if (mkdirat(fd, c->v[i], 0755) < 0 && errno != EEXIST) {
                close(fd);
                return x_errno(x, "mkdir");
            }
            created = true;
            next = openat(fd, c->v[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        }
        int saved = errno;
        close(fd);
        if (next < 0) {
            if (saved == ELOOP || saved == ENOTDIR)
                return x_refuse(x, MSG_X_ESCAPE);
            errno = saved;
            return x_errno(x, "open");
        }
        fd = next;
        /* A parent the archive does not list: 0755 whatever the umask. */
        if (created && fchmod(fd, 0755) < 0) {
            close(fd);
            return x_errno(x, "chmod");
        }
    }
    return fd;
}

static int x_parent(struct extract *x, const struct comps *c)
{
    size_t n = c->n - 1;
    size_t len = 0;
    for (size_t i = 0; i < n; i++)
        len += strlen(c->v[i]) + 1;
    _cleanup_free_ char *key = malloc(len + 1);
    if (!key) {
        errno = ENOMEM;
        return x_errno(x, "path");
    }
    key[0] = '\0';
    char *p = key;
    for (size_t i = 0; i < n; i++)
        p += sprintf(p, "%s/", c->v[i]);
    if (x->cached_parent && strcmp(x->cached_parent, key) == 0)
        return x->cached_fd;
    int fd = x_open_dir(x, c, n);
    if (fd < 0)
        return -1;
    if (x->cached_fd >= 0)
        close(x->cached_fd);
    free(x->cached_parent);
    x->cached_fd = fd;
    x->cached_parent = steal_ptr(key);
    return fd;
}

/* Make room for a non-directory member: an earlier one of the same name is
 * replaced (as tar does), a directory is not. */
static int x_clear_slot(struct extract *x, int pfd, const char *name)
{
    if (unlinkat(pfd, name, 0) == 0 || errno == ENOENT)
        return 0;
    if (errno == EISDIR || errno == EPERM)
        return x_refuse(x, MSG_X_CONFLICT);
    return x_errno(x, "unlink");
}

/* §6.4: no setuid/setgid, no group/other write. */
static mode_t x_sanitize(mode_t mode)
{
    return mode & 07777 & ~(mode_t)(S_ISUID | S_ISGID | S_IWGRP | S_IWOTH);
}

static int x_dir(struct extract *x, int pfd, const char *name, mode_t mode)
{
    if (mkdirat(pfd, name, 0700) < 0 && errno != EEXIST)
        return x_errno(x, "mkdir");
    _cleanup_close_ int fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ELOOP || errno == ENOTDIR)
            return x_refuse(x, MSG_X_CONFLICT);
        return x_errno(x, "open");
    }
    /* Traversal for every sandbox that mounts the template (§6.4). */
    if (fchmod(fd, x_sanitize(mode) | 0111 | 0044) < 0)
        return x_errno(x, "chmod");
    return 0;
}

/* Zero blocks become holes: a sparse file stays sparse in the template
 * root (a 1000 MB file of 4 KB on disk became 1001 MB of real blocks), and
 * only what is written counts against the extraction limit. */
#define HOLE_BLOCK 4096

static bool all_zero(const char *p, size_t n)
{
    return n > 0 && p[0] == 0 && memcmp(p, p + 1, n - 1) == 0;
}

static int x_write_sparse(struct extract *x, int fd, const char *data, size_t n)
{
    size_t done = 0;
    while (done < n) {
        size_t len = n - done < HOLE_BLOCK ? n - done : HOLE_BLOCK;
        if (all_zero(data + done, len)) {
            if (lseek(fd, (off_t)len, SEEK_CUR) < 0)
                return x_errno(x, "seek");
            done += len;
            continue;
        }
        /* A run of data blocks in one write. */
        size_t run = len;
        while (done + run < n) {
            size_t next = n - done - run < HOLE_BLOCK ? n - done - run : HOLE_BLOCK;
            if (all_zero(data + done + run, next))
                break;
            run += next;
        }
        x->total += (int64_t)run;
        if (x->max_bytes > 0 && x->total > x->max_bytes)
            return sl_error_set(x->err, SL_E_INVALID_ARGUMENT, 0,
                                "template expands to more than %" PRId64
                                " bytes; refusing to extract",
                                x->max_bytes);
        if (write_all(fd, data + done, run) < 0)
            return x_errno(x, "write");
        done += run;
    }
    return 0;
}

static int x_file(struct extract *x, int pfd, const char *name, mode_t mode, time_t mtime)
{
    if (x_clear_slot(x, pfd, name) < 0)
        return -1;
    _cleanup_close_ int fd =
        openat(pfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return x_errno(x, "create");
    off_t size = 0;
    for (;;) {
        la_ssize_t n = archive_read_data(x->a, x->buf, IO_CHUNK);
        if (n < 0)
            return x_refuse(x, MSG_X_CORRUPT);
        if (n == 0)
            break;
        if (x_write_sparse(x, fd, x->buf, (size_t)n) < 0)
            return -1;
        size += n;
    }
    /* Trailing zeros were skipped: the size comes from here. */
    if (ftruncate(fd, size) < 0)
        return x_errno(x, "truncate");
    if (fchmod(fd, x_sanitize(mode)) < 0)
        return x_errno(x, "chmod");
    struct timespec times[2] = {{.tv_sec = mtime}, {.tv_sec = mtime}};
    if (futimens(fd, times) < 0)
        return x_errno(x, "utimens");
    if (close(steal_fd(fd)) < 0)
        return x_errno(x, "close");
    return 0;
}

static int x_symlink(struct extract *x, int pfd, const char *name, const char *target,
                     size_t parent_depth, time_t mtime)
{
    /* Absolute targets are allowed: they resolve inside the sandbox that
     * mounts the template. A relative one must stay inside the tree. */
    if (target[0] != '/' && symlink_escapes(target, parent_depth))
        return x_refuse(x, MSG_X_SYMLINK);
    if (x_clear_slot(x, pfd, name) < 0)
        return -1;
    if (symlinkat(target, pfd, name) < 0)
        return errno == ENOENT ? x_refuse(x, MSG_X_CORRUPT) : x_errno(x, "symlink");
    struct timespec times[2] = {{.tv_sec = mtime}, {.tv_sec = mtime}};
    if (utimensat(pfd, name, times, AT_SYMLINK_NOFOLLOW) < 0)
        return x_errno(x, "utimens");
    return 0;
}

/* Only to a regular file already extracted: a hard link to a relative
 * symlink would move the link's starting point and could make it escape. */
static int x_hardlink(struct extract *x, int pfd, const char *name, const char *target)
{
    if (target[0] == '/')
        return x_refuse(x, MSG_X_HARDLINK);
    struct comps tc = {0};
    int r = comps_split(target, &tc);
    if (r != 0 || tc.n == 0) {
        comps_free(&tc);
        if (r < 0) {
            errno = ENOMEM;
            return x_errno(x, "path");
        }
        return x_refuse(x, MSG_X_HARDLINK);
    }
    int tfd = x_open_dir(x, &tc, tc.n - 1);
    if (tfd < 0) {
        comps_free(&tc);
        if (sl_error_is(x->err, SL_E_INVALID_ARGUMENT))
            return x_refuse(x, MSG_X_HARDLINK);
        return -1;
    }
    const char *tname = tc.v[tc.n - 1];
    struct stat st;
    int rc = 0;
    if (fstatat(tfd, tname, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
        rc = x_refuse(x, MSG_X_HARDLINK);
    else if (x_clear_slot(x, pfd, name) < 0)
        rc = -1;
    else if (linkat(tfd, tname, pfd, name, 0) < 0)
        rc = x_errno(x, "link");
    close(tfd);
    comps_free(&tc);
    return rc;
}

static int x_entry(struct extract *x, struct archive_entry *e, struct comps *c)
{
    const char *name = archive_entry_pathname(e);
    if (!name || !name[0])
        return x_refuse(x, MSG_X_CORRUPT);
    x->member = name;
    if (name[0] == '/')
        return x_refuse(x, MSG_X_ABSOLUTE);
    int r = comps_split(name, c);
    if (r < 0) {
        errno = ENOMEM;
        return x_errno(x, "path");
    }
    if (r > 0)
        return x_refuse(x, MSG_X_ESCAPE);
    if (c->n > SL_TPL_EXTRACT_MAX_DEPTH)
        return x_refuse(x, MSG_X_DEEP);

    const char *hardlink = archive_entry_hardlink(e);
    mode_t type = archive_entry_filetype(e);
    if (!hardlink && type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK)
        return x_refuse(x, MSG_X_SPECIAL);


    if (c->n == 0) {
        /* "." or "./": the destination itself, which keeps its 0755. */
        return type == AE_IFDIR && !hardlink ? 0 : x_refuse(x, MSG_X_CORRUPT);
    }
    int pfd = x_parent(x, c);
    if (pfd < 0)
        return -1;
    const char *leaf = c->v[c->n - 1];
    mode_t mode = archive_entry_perm(e);
    time_t mtime = archive_entry_mtime(e);
    if (hardlink)
        return x_hardlink(x, pfd, leaf, hardlink);
    switch (type) {
    case AE_IFDIR:
        return x_dir(x, pfd, leaf, mode);
    case AE_IFREG:
        return x_file(x, pfd, leaf, mode, mtime);
    default: {
        const char *target = archive_entry_symlink(e);
        if (!target || !target[0])
            return x_refuse(x, MSG_X_CORRUPT);
        return x_symlink(x, pfd, leaf, target, c->n - 1, mtime);
    }
    }
}

static int x_run(struct extract *x, int archive_fd)
{
    struct archive *a = x->a;
    if (archive_read_support_filter_gzip(a) != ARCHIVE_OK ||
        archive_read_support_format_tar(a) != ARCHIVE_OK) {
        sl_error_set(x->err, SL_E_INTERNAL, 0, "template could not be extracted");
        return sl_error_wrap(x->err, "libarchive setup: %s", archive_error_string(a));
    }
    if (archive_read_open_fd(a, archive_fd, IO_CHUNK) != ARCHIVE_OK)
        return refuse(x->err, MSG_X_CORRUPT, NULL);
    struct comps c = {0};
    int rc = 0;
    for (;;) {
        struct archive_entry *e = NULL;
        x->member = NULL;
        int r = archive_read_next_header(a, &e);
        if (r == ARCHIVE_EOF)
            break;
        /* WARN: a name the locale cannot represent; the raw bytes stay. */
        if (r < ARCHIVE_WARN) {
            rc = refuse(x->err, MSG_X_CORRUPT, NULL);
            sl_error_wrap(x->err, "libarchive: %s", archive_error_string(a));
            break;
        }
        if ((rc = x_entry(x, e, &c)) < 0)
            break;
    }
    comps_free(&c);
    return rc;
}

/* Remove everything below dirfd, never following a link. Names are read
 * before descending, so one descriptor per level is held. */
static int rm_tree(int dirfd, int depth)
{
    if (depth > SL_TPL_EXTRACT_MAX_DEPTH + 1)
        return -1;
    int lfd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (lfd < 0)
        return -1;
    DIR *d = fdopendir(lfd);
    if (!d) {
        close(lfd);
        return -1;
    }
    struct sl_strlist names = {0};
    struct dirent *de;
    int rc = 0;
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") &&
            sl_strlist_push(&names, de->d_name) < 0)
            rc = -1;
    }
    closedir(d);
    for (size_t i = 0; i < names.len; i++) {
        const char *n = names.items[i];
        if (unlinkat(dirfd, n, 0) == 0 || errno == ENOENT)
            continue;
        if (errno != EISDIR && errno != EPERM) {
            rc = -1;
            continue;
        }
        int sub = openat(dirfd, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub < 0) {
            rc = -1;
            continue;
        }
        if (rm_tree(sub, depth + 1) < 0)
            rc = -1;
        close(sub);
        if (unlinkat(dirfd, n, AT_REMOVEDIR) < 0)
            rc = -1;
    }
    sl_strlist_free(&names);
    return rc;
}

int sl_tpl_extract(const char *archive_path, const char *name, const char *expected_digest,
                   const char *dest_dir, int64_t max_extract_bytes, struct sl_error *err)
{
    if (!archive_path || !dest_dir)
        return sl_error_set(err, SL_E_INTERNAL, EINVAL, "template could not be extracted");
    _cleanup_close_ int fd = open(archive_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        sl_error_errno(err, SL_E_INTERNAL, "template archive could not be read");
        return sl_error_wrap(err, "open %s", archive_path);
    }
    /* The digest is checked on the very descriptor that is then extracted. */
    char got[SL_TPL_DIGEST_SIZE];
    if (digest_fd(fd, got, err) < 0)
        return sl_error_wrap(err, "read %s", archive_path);
    if (!expected_digest || strcmp(got, expected_digest) != 0)
        return sl_error_set(err, SL_E_INVALID_ARGUMENT, 0,
                            "template %s digest mismatch: expected %s, got %s", name ? name : "",
                            expected_digest ? expected_digest : "", got);
    if (lseek(fd, 0, SEEK_SET) < 0)
        return sl_error_errno(err, SL_E_INTERNAL, "template archive could not be read");

    if (mkdir(dest_dir, 0755) < 0) {
        sl_error_errno(err, SL_E_INTERNAL, "template could not be extracted");
        return sl_error_wrap(err, "mkdir %s", dest_dir);
    }
    int root_fd = open(dest_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (root_fd < 0) {
        sl_error_errno(err, SL_E_INTERNAL, "template could not be extracted");
        sl_error_wrap(err, "open %s", dest_dir);
        rmdir(dest_dir);
        return -1;
    }
    struct extract x = {
        .root_fd = root_fd,
        .max_bytes = max_extract_bytes,
        .err = err,
        .cached_fd = -1,
        .a = archive_read_new(),
        .buf = malloc(IO_CHUNK),
    };
    int rc;
    if (!x.a || !x.buf) {
        errno = ENOMEM;
        rc = sl_error_errno(err, SL_E_INTERNAL, "template could not be extracted");
    } else if (fchmod(root_fd, 0755) < 0) { /* whatever the umask */
        rc = sl_error_errno(err, SL_E_INTERNAL, "template could not be extracted");
    } else {
        struct locale_pin pin;
        locale_pin_c(&pin);
        rc = x_run(&x, fd);
        locale_unpin(&pin);
    }
    if (x.a)
        archive_read_free(x.a);
    free(x.buf);
    if (x.cached_fd >= 0)
        close(x.cached_fd);
    free(x.cached_parent);
    if (rc < 0) {
        sl_error_wrap(err, "extract into %s", dest_dir);
        rm_tree(root_fd, 0);
        close(root_fd);
        rmdir(dest_dir);
        return -1;
    }
    close(root_fd);
    return 0;
}
