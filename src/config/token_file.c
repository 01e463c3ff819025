#include "config/token_file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "config/config.h"

#define TOKEN_MAX 512

/* The file's token, checked; -1 with err. */
static int read_token(const char *path, char **token, struct sl_error *err)
{
    _cleanup_close_ int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT
                   ? 1
                   : sl_error_errno(err, SL_E_CONFIG, "SANDBOX_INTERNAL_TOKEN_FILE: cannot open %s",
                                    path);
    struct stat st;
    if (fstat(fd, &st) < 0)
        return sl_error_errno(err, SL_E_CONFIG, "SANDBOX_INTERNAL_TOKEN_FILE: cannot inspect %s",
                              path);
    if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077))
        return sl_error_set(err, SL_E_CONFIG, 0,
                            "SANDBOX_INTERNAL_TOKEN_FILE: %s must be a regular file owned by "
                            "this user with mode 0600 (it holds the API token)",
                            path);
    char buf[TOKEN_MAX + 2];
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    if (n < 0)
        return sl_error_errno(err, SL_E_CONFIG, "SANDBOX_INTERNAL_TOKEN_FILE: cannot read %s",
                              path);
    buf[n] = '\0';
    size_t len = strcspn(buf, "\r\n");
    bool printable = len > 0;
    for (size_t i = 0; i < len; i++)
        if (buf[i] <= ' ' || buf[i] > '~')
            printable = false;
    if (!printable || len < SL_CONFIG_TOKEN_MIN_CHARS || len > TOKEN_MAX ||
        strspn(buf + len, "\r\n") != (size_t)n - len) {
        explicit_bzero(buf, sizeof(buf));
        return sl_error_set(err, SL_E_CONFIG, 0,
                            "SANDBOX_INTERNAL_TOKEN_FILE: %s must hold one token of %d to %d "
                            "printable characters on one line (remove the file to have a new "
                            "one generated)",
                            path, SL_CONFIG_TOKEN_MIN_CHARS, TOKEN_MAX);
    }
    *token = strndup(buf, len);
    explicit_bzero(buf, sizeof(buf));
    if (!*token)
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    return 0;
}

/* Written under a temporary name, then linked into place: a reader never
 * sees half a token, and a file another process made first is kept. */
static int save_token(const char *path, const char *token, struct sl_error *err)
{
    char tmp[PATH_MAX];
    char suffix[17];
    if (sl_random_hex(suffix, 8) < 0 ||
        snprintf(tmp, sizeof(tmp), "%s.%s", path, suffix) >= (int)sizeof(tmp))
        return sl_error_set(err, SL_E_CONFIG, 0, "SANDBOX_INTERNAL_TOKEN_FILE: path too long");
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return sl_error_errno(err, SL_E_CONFIG, "SANDBOX_INTERNAL_TOKEN_FILE: cannot create %s",
                              tmp);
    size_t len = strlen(token);
    errno = EIO; /* what a short write reports */
    bool ok = fchmod(fd, 0600) == 0 && write(fd, token, len) == (ssize_t)len &&
              write(fd, "\n", 1) == 1 && fsync(fd) == 0;
    int saved = errno;
    close(fd);
    if (ok && link(tmp, path) < 0) {
        saved = errno;
        ok = false;
    }
    (void)unlink(tmp);
    if (!ok) {
        errno = saved;
        return saved == EEXIST
                   ? 1
                   : sl_error_errno(err, SL_E_CONFIG,
                                    "SANDBOX_INTERNAL_TOKEN_FILE: cannot write %s", path);
    }
    return 0;
}

int sl_token_file_load(const char *path, const char *fresh, char **token, bool *created,
                       struct sl_error *err)
{
    *token = NULL;
    *created = false;
    int r = read_token(path, token, err);
    if (r <= 0)
        return r;
    r = save_token(path, fresh, err);
    if (r < 0)
        return -1;
    if (r == 1) { /* another start saved one first: that one is the token */
        r = read_token(path, token, err);
        if (r == 1)
            return sl_error_set(err, SL_E_CONFIG, 0,
                                "SANDBOX_INTERNAL_TOKEN_FILE: %s appeared and went away while "
                                "being saved",
                                path);
        return r;
    }
    *created = true;
    if (!(*token = strdup(fresh)))
        return sl_error_set(err, SL_E_INTERNAL, ENOMEM, "out of memory");
    return 0;
}
