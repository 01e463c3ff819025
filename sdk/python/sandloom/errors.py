"""Typed exceptions, one per stable error code of the Sandloom API.

Every error answer of the service is ``{"detail": {"code", "message"}}``;
``raise_for`` turns one into the most specific class below (a code it does
not know becomes the class of its HTTP status, else ``SandloomError``)."""

from __future__ import annotations

from typing import Dict, Optional, Type


class SandloomError(Exception):
    """An error answer of the service, or no answer at all (status 0)."""

    def __init__(self, code: str, message: str, status: int, *, limit: Optional[str] = None,
                 value: Optional[int] = None) -> None:
        super().__init__(f"{code}: {message}" if message and message != code else code)
        self.code = code
        self.message = message
        self.status = status
        #: The limit that refused and its value, when the service names one
        #: (a tenant's quota: "running_sessions", 5).
        self.limit = limit
        self.value = value


class ConnectionFailed(SandloomError):
    """The service could not be reached, or the connection broke."""


class InvalidRequest(SandloomError):
    """400 / 422: a value in the request is not acceptable."""


class Unauthorized(SandloomError):
    """401: the token or API key was not accepted."""


class Forbidden(SandloomError):
    """403: this credential may not call this route."""


class NotFound(SandloomError):
    """404: no such sandbox, execution, tenant, key or route."""


class PathNotFound(NotFound):
    """A file route's path does not exist in the sandbox (the service says
    400 "path does not exist", as the reference does)."""


class Conflict(SandloomError):
    """409: the sandbox's state does not allow this now."""


class StaleGeneration(Conflict):
    """409: the generation used is not the sandbox's current one. The SDK
    resolves again and retries once by itself before raising this."""


class Suspended(Conflict):
    """409: the sandbox is suspended; resume it first."""


class ScopeBusy(Conflict):
    """409: another command holds this exec_scope."""


class Busy(Conflict):
    """409: the sandbox is busy (a command, a file or template operation)."""


class TooManyRequests(SandloomError):
    """429: a limit on concurrent work was reached."""


class ParallelLimit(TooManyRequests):
    """429: the sandbox runs as many commands as it may at once."""


class QuotaExceeded(TooManyRequests):
    """429: a tenant's quota is used up: ``limit`` names it, ``value`` is
    its value."""


class Unavailable(SandloomError):
    """5xx: the service, its database or a worker cannot serve now."""


_BY_CODE: Dict[str, Type[SandloomError]] = {
    "STALE_SANDBOX_GENERATION": StaleGeneration,
    "STALE_SANDBOX_ROUTE": StaleGeneration,
    "SANDBOX_SUSPENDED": Suspended,
    "SANDBOX_EXEC_SCOPE_BUSY": ScopeBusy,
    "SANDBOX_BUSY_OR_STALE": Busy,
    "SANDBOX_FILE_PATH_LOCKED": Busy,
    "SANDBOX_SHARED_WORKSPACE_LOCKED": Busy,
    "SANDBOX_SUSPEND_BUSY": Busy,
    "SANDBOX_PARALLEL_EXEC_LIMIT": ParallelLimit,
    "TENANT_QUOTA_EXCEEDED": QuotaExceeded,
    "SANDBOX_UNAUTHORIZED": Unauthorized,
    "TENANT_FORBIDDEN": Forbidden,
}

_BY_STATUS: Dict[int, Type[SandloomError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    422: InvalidRequest,
    429: TooManyRequests,
}


def error_for(code: str, message: str, status: int, *, limit: Optional[str] = None,
              value: Optional[int] = None) -> SandloomError:
    if code == "SANDBOX_INVALID_ARGUMENT" and message.startswith("path does not exist"):
        return PathNotFound(code, message, status)
    cls: Optional[Type[SandloomError]] = _BY_CODE.get(code) or _BY_STATUS.get(status)
    if cls is None:
        cls = Unavailable if status >= 500 else SandloomError
    return cls(code, message, status, limit=limit, value=value)
