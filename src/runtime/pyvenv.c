#include "runtime/pyvenv.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"

#define HOST_PYTHON "/usr/bin/python3"
#define VENV "python-venv"
#define VENV_ROOT "/envs/" VENV

static char version[16];
static pthread_once_t version_once = PTHREAD_ONCE_INIT;

static void find_version(void)
{
    char real[PATH_MAX];
    if (!realpath(HOST_PYTHON, real))
        return;
    const char *base = strrchr(real, '/');
    base = base ? base + 1 : real;
    unsigned major, minor;
    if (sscanf(base, "python%u.%u", &major, &minor) == 2)
        snprintf(version, sizeof(version), "%u.%u", major, minor);
}

const char *sl_pyvenv_python_version(void)
{
    pthread_once(&version_once, find_version);
    return version[0] ? version : NULL;
}

/* Every step below the sandbox root is relative to a directory descriptor
 * and refuses symlinks: /envs is the sandbox user's to change. */
static int mkdir_owned(int dirfd, const char *name, uid_t uid)
{
    if (mkdirat(dirfd, name, 0755) < 0 && errno != EEXIST)
        return -1;
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -1;
    if (fchown(fd, uid, uid) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int write_owned(int dirfd, const char *name, const char *text, mode_t mode, uid_t uid)
{
    _cleanup_close_ int fd =
        openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0)
        return errno == EEXIST ? 0 : -1;
    size_t len = strlen(text);
    if (write(fd, text, len) != (ssize_t)len || fchown(fd, uid, uid) < 0 || fchmod(fd, mode) < 0) {
        int saved = errno ? errno : EIO;
        (void)unlinkat(dirfd, name, 0);
        errno = saved;
        return -1;
    }
    return 0;
}

/* Links stay root's: a link's owner does not matter (the directory is the
 * sandbox user's, who may remove it), and changing it by name as root
 * could be raced into changing something else. */
static int link_owned(int dirfd, const char *target, const char *name, uid_t uid)
{
    (void)uid;
    return symlinkat(target, dirfd, name) < 0 && errno != EEXIST ? -1 : 0;
}

/* bin/: the interpreter as the venv module links it, and pip launchers. */
static int make_bin(int venv_fd, const char *ver, uid_t uid)
{
    _cleanup_close_ int bin = mkdir_owned(venv_fd, "bin", uid);
    if (bin < 0)
        return -1;
    char versioned[32];
    snprintf(versioned, sizeof(versioned), "python%s", ver);
    static const char pip[] = "#!/bin/sh\n"
                              "# managed by sandloom: the system's pip, run by this environment's\n"
                              "# interpreter, installs here (PEP 668 allows it in a venv)\n"
                              "exec " VENV_ROOT "/bin/python -m pip \"$@\"\n";
    static const char activate[] = "# source this file to use the environment in a shell\n"
                                   "VIRTUAL_ENV=" VENV_ROOT "\n"
                                   "export VIRTUAL_ENV\n"
                                   "PATH=\"$VIRTUAL_ENV/bin:$PATH\"\n"
                                   "export PATH\n";
    char pip_v[32];
    snprintf(pip_v, sizeof(pip_v), "pip%s", ver);
    if (link_owned(bin, HOST_PYTHON, "python3", uid) < 0 ||
        link_owned(bin, "python3", "python", uid) < 0 ||
        link_owned(bin, "python3", versioned, uid) < 0 ||
        write_owned(bin, "pip", pip, 0755, uid) < 0 || link_owned(bin, "pip", "pip3", uid) < 0 ||
        link_owned(bin, "pip", pip_v, uid) < 0 ||
        write_owned(bin, "activate", activate, 0644, uid) < 0)
        return -1;
    return 0;
}

static int make_lib(int venv_fd, const char *ver, uid_t uid)
{
    _cleanup_close_ int lib = mkdir_owned(venv_fd, "lib", uid);
    if (lib < 0)
        return -1;
    char py[32];
    snprintf(py, sizeof(py), "python%s", ver);
    _cleanup_close_ int pydir = mkdir_owned(lib, py, uid);
    if (pydir < 0)
        return -1;
    _cleanup_close_ int site = mkdir_owned(pydir, "site-packages", uid);
    if (site < 0)
        return -1;
    return link_owned(venv_fd, "lib", "lib64", uid);
}

/* What make_venv writes, for removing a half-made one. */
static void remove_venv(int envs, const char *name, const char *ver)
{
    _cleanup_close_ int venv = openat(envs, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (venv >= 0) {
        char py[32], pip_v[32];
        snprintf(py, sizeof(py), "python%s", ver);
        snprintf(pip_v, sizeof(pip_v), "pip%s", ver);
        _cleanup_close_ int bin =
            openat(venv, "bin", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        const char *files[] = {"python3", "python", py, "pip", "pip3", pip_v, "activate"};
        for (size_t i = 0; bin >= 0 && i < sizeof(files) / sizeof(files[0]); i++)
            (void)unlinkat(bin, files[i], 0);
        (void)unlinkat(venv, "bin", AT_REMOVEDIR);
        _cleanup_close_ int lib =
            openat(venv, "lib", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (lib >= 0) {
            _cleanup_close_ int pydir =
                openat(lib, py, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (pydir >= 0)
                (void)unlinkat(pydir, "site-packages", AT_REMOVEDIR);
            (void)unlinkat(lib, py, AT_REMOVEDIR);
        }
        (void)unlinkat(venv, "lib", AT_REMOVEDIR);
        (void)unlinkat(venv, "lib64", 0);
        (void)unlinkat(venv, "pyvenv.cfg", 0);
    }
    (void)unlinkat(envs, name, AT_REMOVEDIR);
}

static int make_venv(int envs, const char *name, const char *ver, uid_t uid)
{
    _cleanup_close_ int venv = -1;
    if (mkdirat(envs, name, 0755) < 0 ||
        (venv = openat(envs, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
        fchown(venv, uid, uid) < 0)
        return -1;
    char cfg[256];
    snprintf(cfg, sizeof(cfg),
             "home = /usr/bin\n"
             "include-system-site-packages = true\n"
             "version = %s\n"
             "executable = " HOST_PYTHON "\n",
             ver);
    if (make_bin(venv, ver, uid) < 0 || make_lib(venv, ver, uid) < 0 ||
        write_owned(venv, "pyvenv.cfg", cfg, 0644, uid) < 0)
        return -1;
    return 0;
}

int sl_pyvenv_ensure(int sandbox_root_fd, uid_t uid, struct sl_error *err)
{
    const char *ver = sl_pyvenv_python_version();
    if (!ver)
        return 0; /* no host python3: the python toolchain's check says missing */
    _cleanup_close_ int envs =
        openat(sandbox_root_fd, "envs", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (envs < 0)
        return sl_error_errno(err, SL_E_RUNTIME, "cannot open the sandbox's envs directory");
    struct stat st;
    if (fstatat(envs, VENV, &st, AT_SYMLINK_NOFOLLOW) == 0)
        return 0; /* made before, or the user's own: left as it is */
    /* Made complete under a name of its own, then renamed into place, so
     * neither a failure half-way nor two commands making it at once leave
     * a half environment at /envs/python-venv. */
    char tmp[64], hex[17];
    if (sl_random_hex(hex, 8) < 0)
        return sl_error_errno(err, SL_E_RUNTIME, "no randomness");
    snprintf(tmp, sizeof(tmp), "." VENV ".%s", hex);
    if (make_venv(envs, tmp, ver, uid) < 0) {
        int saved = errno;
        remove_venv(envs, tmp, ver);
        errno = saved;
        return sl_error_errno(err, SL_E_RUNTIME, "cannot make %s", VENV_ROOT);
    }
    if (renameat(envs, tmp, envs, VENV) < 0) {
        int saved = errno;
        remove_venv(envs, tmp, ver);
        /* Another command made it first, or the user put something there. */
        if (saved == ENOTEMPTY || saved == EEXIST || saved == ENOTDIR)
            return 0;
        errno = saved;
        return sl_error_errno(err, SL_E_RUNTIME, "cannot put %s in place", VENV_ROOT);
    }
    return 0;
}
