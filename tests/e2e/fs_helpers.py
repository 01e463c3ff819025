"""Helpers shared by the end-to-end tests that need a filesystem of their
own or wait for a condition: a size-limited tmpfs mounted for one test,
and polling with a deadline."""

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path


@contextlib.contextmanager
def tmpfs(size, prefix="sandloom-tmpfs-"):
    """A tmpfs of `size` (mount's syntax, e.g. "32m") at a fresh directory,
    traversable by the sandbox uids (0711); unmounted and removed after."""
    mnt = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(mnt, 0o711)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0711", "tmpfs", str(mnt)],
                   check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
        shutil.rmtree(mnt, ignore_errors=True)


def wait_until(predicate, timeout, step=0.1):
    """True as soon as predicate() is; else its value at the deadline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()
