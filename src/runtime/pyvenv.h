/* The managed Python environment, /envs/python-venv (python toolchain).
 *
 * The reference puts /envs/python-venv/bin on PATH but never makes it, so
 * `pip install` reaches Debian's system pip, which refuses (PEP 668: the
 * system Python is externally managed). Here the first command of a
 * sandbox finds it made: a virtual environment over the host's python3
 * (/usr/bin/python3, read-only in the sandbox) with the system packages
 * visible, written directly (pyvenv.cfg, the interpreter links, an empty
 * site-packages, pip launchers) in microseconds instead of the seconds
 * `python3 -m venv` takes. Its pip is the system's pip module run by the
 * environment's interpreter, which installs into the environment (pip
 * applies PEP 668 outside virtual environments only). PYTHONPATH names
 * its site-packages (runtime/env.c), so the sandbox's python3 imports
 * what pip installed. It lives in /envs, persisted with the sandbox, and
 * belongs to the sandbox's uid. */
#ifndef SL_RUNTIME_PYVENV_H
#define SL_RUNTIME_PYVENV_H

#include <sys/types.h>

#include "common/error.h"

/* "3.11": the host python3's version, from the name /usr/bin/python3
 * resolves to; NULL when there is none. Found once. */
const char *sl_pyvenv_python_version(void);

/* Make <sandbox root>/envs/python-venv unless it exists (any pyvenv.cfg
 * there is the user's to keep). 0, or -1 with err. */
int sl_pyvenv_ensure(int sandbox_root_fd, uid_t uid, struct sl_error *err);

#endif
