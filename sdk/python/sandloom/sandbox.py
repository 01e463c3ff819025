"""A sandbox by name: the SDK resolves it, connects it, and carries its
generation (the fencing token of the API) itself; a call that meets a stale
generation resolves again and is retried once. Commands get an exec_id of
their own, so a call retried after a lost answer is answered from the record
instead of running twice."""

from __future__ import annotations

import base64
import time
import urllib.parse
import uuid
from dataclasses import dataclass
from types import TracebackType
from typing import (Any, Callable, Dict, Iterator, List, Literal, Mapping, Optional, Sequence,
                    Tuple, Type, TypeVar, Union, overload)

from .client import JSON, Client
from .errors import ConnectionFailed, StaleGeneration

T = TypeVar("T")
Command = Union[str, Sequence[str]]
# A command's own time limit beyond which the request itself may not wait.
_GRACE_SECONDS = 30.0
_DEFAULT_COMMAND_SECONDS = 300


@dataclass(frozen=True)
class CommandResult:
    """How a command ended (or, for a background one polled, how it is)."""

    exec_id: str
    status: str  # SUCCEEDED, FAILED, TIMED_OUT, CANCELLED, RUNNING, ...
    exit_code: Optional[int]
    stdout: str
    stderr: str
    duration_ms: Optional[int]
    truncated: bool
    termination_reason: Optional[str]

    @property
    def ok(self) -> bool:
        return self.status == "SUCCEEDED" and self.exit_code == 0

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "CommandResult":
        return cls(exec_id=str(d["exec_id"]), status=str(d["status"]),
                   exit_code=d.get("exit_code"), stdout=str(d.get("stdout") or ""),
                   stderr=str(d.get("stderr") or ""), duration_ms=d.get("duration_ms"),
                   truncated=bool(d.get("truncated")),
                   termination_reason=d.get("termination_reason"))


@dataclass(frozen=True)
class Entry:
    """One entry of a directory listing."""

    name: str
    path: str
    type: str  # file, directory, symlink
    size_bytes: int
    modified_at: float
    mode: int


class CommandHandle:
    """A command running in the background: poll it, wait for it, kill it."""

    def __init__(self, sandbox: "Sandbox", exec_id: str) -> None:
        self.sandbox = sandbox
        self.exec_id = exec_id
        self.result: Optional[CommandResult] = None  # set when output() reaches the end

    def __repr__(self) -> str:
        return f"CommandHandle({self.sandbox.name!r}, {self.exec_id!r})"

    def status(self) -> CommandResult:
        """The command's record now (status RUNNING while it runs)."""
        sb = self.sandbox
        path = f"{sb._path}/exec/{urllib.parse.quote(self.exec_id, safe='')}"
        return CommandResult.from_json(
            sb._fenced(lambda g: sb.client.request("GET", path, query={"generation": g})))

    def wait(self, timeout: Optional[float] = None, interval: float = 0.1) -> CommandResult:
        """Poll until the command ends; TimeoutError after `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            r = self.status()
            if r.status != "RUNNING":
                return r
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"{self.exec_id} still running after {timeout} s")
            time.sleep(interval)
            interval = min(interval * 1.5, 1.0)

    def output(self) -> Iterator[Tuple[str, bytes]]:
        """The command's output as it comes, from its start: ("stdout" or
        "stderr", bytes) pairs, until it ends; then ``self.result`` is its
        record (without the output). A dropped connection is taken up again
        from the last chunk: nothing comes twice or goes missing."""
        sb = self.sandbox
        path = f"{sb._path}/exec/{urllib.parse.quote(self.exec_id, safe='')}/stream"
        last: Optional[str] = None
        for attempt in range(6):
            try:
                for name, eid, data in sb.client.events(
                        "GET", path, query={"generation": sb.generation}, last_event_id=last):
                    last = eid or last
                    if name in ("stdout", "stderr"):
                        yield name, (data["text"].encode("utf-8") if "text" in data
                                     else base64.b64decode(data["base64"]))
                    elif name == "end":
                        self.result = CommandResult.from_json(data)
                        return
                return
            except StaleGeneration:
                if attempt == 5:
                    raise
                sb._open()  # moved or resumed: the same command, from the last chunk
            except ConnectionFailed:
                if attempt == 5:
                    raise
                time.sleep(0.5)

    def write(self, data: Union[str, bytes], close: bool = False) -> int:
        """Send bytes to the command's stdin (it was started with
        stdin=True); how many it took (fewer: it is not reading)."""
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        return int(self._stdin({"data_base64": base64.b64encode(raw).decode(),
                                "close": close}).get("written", 0))

    def close_stdin(self) -> None:
        """End the command's input."""
        self._stdin({"close": True})

    def signal(self, name: str) -> bool:
        """SIGINT, SIGTERM, SIGKILL, SIGHUP or SIGQUIT to the command, once;
        False if it had ended."""
        sb = self.sandbox
        path = f"{sb._path}/exec/{urllib.parse.quote(self.exec_id, safe='')}/signal"
        r = sb._fenced(lambda g: sb.client.request("POST", path, body={"signal": name},
                                                   query={"generation": g}))
        return bool(r.get("signalled"))

    def _stdin(self, body: Dict[str, Any]) -> JSON:
        sb = self.sandbox
        path = f"{sb._path}/exec/{urllib.parse.quote(self.exec_id, safe='')}/stdin"
        return sb._fenced(lambda g: sb.client.request("POST", path, body=body,
                                                      query={"generation": g}))

    def kill(self) -> bool:
        """Signal the command's process tree to stop; False if it had ended."""
        sb = self.sandbox
        path = f"{sb._path}/exec/{urllib.parse.quote(self.exec_id, safe='')}/cancel"
        r = sb._fenced(lambda g: sb.client.request("POST", path, query={"generation": g}))
        return bool(r.get("cancelled"))


class Files:
    """The sandbox's files (paths are inside the sandbox: /workspace, /home ...)."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    def write(self, path: str, data: Union[str, bytes]) -> None:
        """Create or atomically replace a file (text is written as UTF-8)."""
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        body = {"path": path, "content_base64": base64.b64encode(raw).decode("ascii")}
        self._sb._fenced(lambda g: self._sb.client.request(
            "PUT", self._sb._path + "/files", body={**body, "generation": g}))

    def read(self, path: str) -> bytes:
        r = self._sb._fenced(lambda g: self._sb.client.request(
            "GET", self._sb._path + "/files", query={"path": path, "generation": g}))
        return base64.b64decode(str(r["content_base64"]), validate=True)

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return self.read(path).decode(encoding)

    def list(self, path: str = "/workspace") -> List[Entry]:
        """Every entry of a directory, by name (pages fetched as needed)."""
        out: List[Entry] = []
        offset = 0
        while True:
            r = self._sb._fenced(lambda g: self._sb.client.request(
                "GET", self._sb._path + "/files/list",
                query={"path": path, "generation": g, "offset": offset, "limit": 1000}))
            for e in r.get("entries", []):
                out.append(Entry(name=e["name"], path=e["path"], type=e["type"],
                                 size_bytes=int(e["size_bytes"]),
                                 modified_at=float(e["modified_at"]), mode=int(e["mode"])))
            if not r.get("has_more"):
                return out
            offset += len(r.get("entries", [])) or 1

    def mkdir(self, path: str, parents: bool = False) -> None:
        self._post("/files/mkdir", {"path": path, "parents": parents})

    def remove(self, path: str, recursive: bool = False) -> None:
        self._post("/files/delete", {"path": path, "recursive": recursive})

    def move(self, source: str, destination: str, overwrite: bool = False) -> None:
        self._post("/files/move", {"source": source, "destination": destination,
                                   "overwrite": overwrite})

    def _post(self, suffix: str, body: Dict[str, Any]) -> None:
        self._sb._fenced(lambda g: self._sb.client.request(
            "POST", self._sb._path + suffix, body={**body, "generation": g}))


class Sandbox:
    """A persistent sandbox, named by you; see ``Sandbox.create``."""

    def __init__(self, name: str, client: Optional[Client] = None,
                 scope: str = "default", keep: bool = False) -> None:
        self.name = name
        self.client = client or Client()
        self.scope = scope
        self.keep = keep
        self.generation = 0
        self.uid: Optional[int] = None
        self.files = Files(self)
        self._path = "/api/v1/sandboxes/" + urllib.parse.quote(name, safe="")

    def __repr__(self) -> str:
        return f"Sandbox({self.name!r}, generation={self.generation})"

    @classmethod
    def create(cls, name: str, client: Optional[Client] = None, scope: str = "default",
               keep: bool = False) -> "Sandbox":
        """Find or create the sandbox `name` and make it ready to run
        commands. Used as a context manager, it is released on exit unless
        `keep` (its workspace then stays for the next create)."""
        sb = cls(name, client, scope, keep)
        sb._open()
        return sb

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]],
                 exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        if not self.keep:
            self.release()

    # -- lifecycle -----------------------------------------------------------
    def _open(self) -> None:
        r = self.client.request("POST", "/api/v1/sandboxes/resolve",
                                body={"sandbox_id": self.name, "workspace_scope_id": self.scope})
        self.generation = int(r["generation"])
        self.uid = r.get("sandbox_uid")
        if r.get("status") in ("SUSPENDED", "SUSPENDING"):
            self.resume()
            return
        self.client.request("POST", self._path, body={"generation": self.generation})

    def _fenced(self, call: Callable[[int], T]) -> T:
        """Run call(generation); on a stale generation resolve again and
        retry once (the sandbox moved, was resumed, or its worker restarted)."""
        try:
            return call(self.generation)
        except StaleGeneration:
            self._open()
            return call(self.generation)

    def info(self) -> JSON:
        """The sandbox's route record (status, worker, generation, ...)."""
        return self.client.request("GET", self._path)

    def suspend(self) -> JSON:
        """Stop every process, keep the files, free the slot."""
        return self._fenced(lambda g: self.client.request(
            "POST", self._path + "/suspend", body={"generation": g}))

    def resume(self) -> JSON:
        r = self.client.request("POST", self._path + "/resume")
        self.generation = int(r["generation"])
        return r

    def release(self) -> None:
        """Destroy the sandbox's processes and workspace."""
        self.client.request("DELETE", self._path)

    # -- network (private network mode) -----------------------------------------
    def network(self) -> JSON:
        """Its network: mode, the egress policy that applies and whose it
        is, state (connected / cut_off / no_session), address, and how many
        packets and names its policy denied."""
        return self.client.request("GET", self._path + "/network")

    def set_egress(self, default: Literal["allow", "deny"] = "allow",
                   allow: Optional[List[str]] = None,
                   deny: Optional[List[str]] = None) -> JSON:
        """Set its egress policy: rules are IPv4 addresses or CIDRs, or
        names ("example.com", "*.example.com"), each with an optional
        ":port" or ":low-high". Allow rules come before deny rules. A running
        sandbox gets the policy at once; answers as network()."""
        egress = {"default": default, "allow": list(allow or []), "deny": list(deny or [])}
        return self._fenced(lambda g: self.client.request(
            "PUT", self._path + "/network", body={"generation": g, "egress": egress}))

    def inherit_egress(self) -> JSON:
        """Drop its own policy: it gets its tenant's, else the worker's."""
        return self._fenced(lambda g: self.client.request(
            "PUT", self._path + "/network", body={"generation": g, "egress": None}))

    # -- commands ------------------------------------------------------------
    @overload
    def run(self, command: Command, *, background: Literal[False] = ...,
            cwd: Optional[str] = ..., env: Optional[Mapping[str, str]] = ...,
            timeout: Optional[int] = ..., exec_scope: Optional[str] = ...,
            exec_id: Optional[str] = ...) -> CommandResult: ...

    @overload
    def run(self, command: Command, *, background: Literal[True],
            cwd: Optional[str] = ..., env: Optional[Mapping[str, str]] = ...,
            timeout: Optional[int] = ..., exec_scope: Optional[str] = ...,
            exec_id: Optional[str] = ..., stdin: bool = ...) -> CommandHandle: ...

    def run(self, command: Command, *, background: bool = False, cwd: Optional[str] = None,
            env: Optional[Mapping[str, str]] = None, timeout: Optional[int] = None,
            exec_scope: Optional[str] = None, exec_id: Optional[str] = None,
            stdin: bool = False) -> Union[CommandResult, CommandHandle]:
        """Run a command: a string goes to ``sh -c``, a list is the argv.
        Waits for it and returns its result, or with background=True returns
        a handle at once. The exec_id is made here unless given, and a call
        whose answer was lost is sent again with the same one (the service
        then answers from its record: the command never runs twice).
        stdin=True (background only) gives the command a stdin the handle
        writes to; handle.output() follows what it prints."""
        argv = ["sh", "-c", command] if isinstance(command, str) else list(command)
        xid = exec_id or "sdk-" + uuid.uuid4().hex
        body: Dict[str, Any] = {"exec_id": xid, "argv": argv, "background": background}
        if cwd is not None:
            body["cwd"] = cwd
        if env:
            body["env"] = dict(env)
        if timeout is not None:
            body["timeout_seconds"] = timeout
        if exec_scope is not None:
            body["exec_scope"] = exec_scope
        if stdin:
            if not background:
                raise ValueError("stdin=True needs background=True: write through the handle")
            body["stdin"] = True
        wait = _GRACE_SECONDS + (0 if background else (timeout or _DEFAULT_COMMAND_SECONDS))

        def send(g: int) -> JSON:
            return self.client.request("POST", self._path + "/exec",
                                       body={**body, "generation": g}, timeout=wait)

        try:
            r = self._fenced(send)
        except ConnectionFailed:
            r = self._fenced(send)  # same exec_id: a replay if it was admitted
        if background:
            return CommandHandle(self, xid)
        return CommandResult.from_json(r)

    # -- templates -----------------------------------------------------------
    def publish_template(self, name: str, source_path: str = "/envs", description: str = "",
                         labels: Optional[Mapping[str, str]] = None) -> JSON:
        """Build a template from a directory of this sandbox and publish it."""
        body: Dict[str, Any] = {"name": name, "source_path": source_path,
                                "description": description, "labels": dict(labels or {})}
        return self._fenced(lambda g: self.client.request(
            "POST", self._path + "/templates", body={**body, "generation": g}, timeout=900))

    def attach_templates(self, refs: Sequence[str]) -> List[JSON]:
        """Mount these templates (``name`` or ``name@sha256:…``) from the next
        command on, read-only at /envs/<name>; replaces the attached set."""
        r = self._fenced(lambda g: self.client.request(
            "PUT", self._path + "/templates", body={"templates": list(refs), "generation": g},
            timeout=600))
        return list(r.get("templates", []))
