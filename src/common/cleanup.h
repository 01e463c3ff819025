/* Scope-bound cleanup helpers.
 *
 * Every variable declared with one of the _cleanup_*_ attributes is released
 * when it goes out of scope; initialise it (to NULL or -1) at declaration.
 * Hand ownership on with steal_ptr()/steal_fd(), which return the value and
 * reset the variable so the cleanup becomes a no-op. */
#ifndef SL_COMMON_CLEANUP_H
#define SL_COMMON_CLEANUP_H

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static inline void sl_freep(void *p) { free(*(void **)p); }
static inline void sl_closep(int *fd)
{
    if (*fd >= 0) {
        int saved = errno;
        close(*fd);
        errno = saved;
    }
}
static inline void sl_fclosep(FILE **f) { if (*f) fclose(*f); }
static inline void sl_closedirp(DIR **d) { if (*d) closedir(*d); }
static inline void sl_json_decrefp(json_t **j) { json_decref(*j); }

#define _cleanup_free_ __attribute__((cleanup(sl_freep)))
#define _cleanup_close_ __attribute__((cleanup(sl_closep)))
#define _cleanup_fclose_ __attribute__((cleanup(sl_fclosep)))
#define _cleanup_closedir_ __attribute__((cleanup(sl_closedirp)))
#define _cleanup_json_ __attribute__((cleanup(sl_json_decrefp)))

#define steal_ptr(p)                                                           \
    ({                                                                         \
        __typeof__(p) _tmp = (p);                                              \
        (p) = NULL;                                                            \
        _tmp;                                                                  \
    })
#define steal_fd(fd)                                                           \
    ({                                                                         \
        int _tmp = (fd);                                                       \
        (fd) = -1;                                                             \
        _tmp;                                                                  \
    })

/* Retry a syscall expression while it fails with EINTR. */
#define SL_RETRY(expr)                                                         \
    ({                                                                         \
        __typeof__(expr) _r;                                                   \
        do {                                                                   \
            _r = (expr);                                                       \
        } while (_r == -1 && errno == EINTR);                                  \
        _r;                                                                    \
    })

#define SL_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif
