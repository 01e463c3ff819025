"""The Sandloom Python SDK (standard library only).

    from sandloom import Sandbox
    with Sandbox.create("my-project") as sb:
        r = sb.run("python3 -c 'print(6 * 7)'")
        print(r.exit_code, r.stdout)
"""

from .client import Client
from .errors import (Busy, Conflict, ConnectionFailed, Forbidden, InvalidRequest, NotFound,
                     ParallelLimit, PathNotFound, QuotaExceeded, SandloomError, ScopeBusy, StaleGeneration,
                     Suspended, TooManyRequests, Unauthorized, Unavailable)
from .sandbox import CommandHandle, CommandResult, Entry, Files, Sandbox

__version__ = "0.3.0"
__all__ = [
    "Busy", "Client", "CommandHandle", "CommandResult", "Conflict", "ConnectionFailed", "Entry",
    "Files", "Forbidden", "InvalidRequest", "NotFound", "ParallelLimit", "PathNotFound",
    "QuotaExceeded",
    "Sandbox", "SandloomError", "ScopeBusy", "StaleGeneration", "Suspended", "TooManyRequests",
    "Unauthorized", "Unavailable",
]
