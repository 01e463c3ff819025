"""The connection to a Sandloom service: one authenticated JSON request at a
time over ``http.client``, errors raised as the typed exceptions of
``sandloom.errors``."""

from __future__ import annotations

import http.client
import json
import os
import socket
import urllib.parse
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

from .errors import ConnectionFailed, SandloomError, error_for

DEFAULT_URL = "http://127.0.0.1:8080"
JSON = Dict[str, Any]


class Client:
    """Where the service is and who is asking.

    ``url`` defaults to ``$SANDLOOM_URL`` (else ``http://127.0.0.1:8080``);
    ``api_key`` to ``$SANDLOOM_API_KEY`` (a tenant's key, or the operator's
    internal token). ``timeout`` bounds each request, in seconds, beyond the
    time a command itself may run."""

    def __init__(self, url: Optional[str] = None, api_key: Optional[str] = None,
                 timeout: float = 60.0) -> None:
        self.url = (url or os.environ.get("SANDLOOM_URL") or DEFAULT_URL).rstrip("/")
        key = api_key if api_key is not None else os.environ.get("SANDLOOM_API_KEY")
        if not key:
            raise SandloomError("SANDLOOM_API_KEY_MISSING",
                                "no API key: pass api_key= or set SANDLOOM_API_KEY", 0)
        self.api_key = key
        self.timeout = timeout
        parts = urllib.parse.urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise SandloomError("SANDLOOM_URL_INVALID",
                                f"the service URL must be http(s)://host[:port], not {self.url!r}",
                                0)
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        self._prefix = parts.path.rstrip("/")

    def __repr__(self) -> str:
        return f"Client(url={self.url!r})"  # never the key

    def request(self, method: str, path: str, body: Optional[Mapping[str, Any]] = None,
                query: Optional[Mapping[str, Any]] = None,
                timeout: Optional[float] = None) -> JSON:
        """One request; the answer's JSON object, or a typed exception."""
        target = self._prefix + path
        if query:
            target += "?" + urllib.parse.urlencode({k: v for k, v in query.items()
                                                    if v is not None})
        headers = {"Authorization": f"Bearer {self.api_key}", "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        conn: http.client.HTTPConnection
        wait = self.timeout if timeout is None else timeout
        if self._https:
            conn = http.client.HTTPSConnection(self._host, self._port, timeout=wait)
        else:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=wait)
        try:
            conn.request(method, target, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
            status = resp.status
        except (OSError, http.client.HTTPException, socket.timeout) as e:
            raise ConnectionFailed("SANDLOOM_CONNECTION_FAILED",
                                   f"{method} {path}: {e.__class__.__name__}: {e}", 0) from e
        finally:
            conn.close()
        try:
            doc = json.loads(raw) if raw else {}
        except ValueError:
            doc = {"detail": raw.decode("utf-8", "replace")}
        if 200 <= status < 300:
            return doc if isinstance(doc, dict) else {"value": doc}
        detail = doc.get("detail") if isinstance(doc, dict) else None
        limit: Optional[str] = None
        value: Optional[int] = None
        if isinstance(detail, dict):
            code = str(detail.get("code") or f"HTTP_{status}")
            message = str(detail.get("message") or code)
            # A limit that refused names itself (TENANT_QUOTA_EXCEEDED).
            if isinstance(detail.get("limit"), str):
                limit = detail["limit"]
            if isinstance(detail.get("value"), int):
                value = detail["value"]
        else:
            code = str(detail) if detail else f"HTTP_{status}"
            message = code
        raise error_for(code, message, status, limit=limit, value=value)

    def events(self, method: str, path: str, body: Optional[Mapping[str, Any]] = None,
               query: Optional[Mapping[str, Any]] = None,
               last_event_id: Optional[str] = None,
               timeout: Optional[float] = None) -> Iterator[Tuple[str, Optional[str], Any]]:
        """A Server-Sent Events answer, event by event: (name, id, data as
        JSON). Refusals raise as request() does; a dropped connection raises
        ConnectionFailed (the caller goes on from the last id)."""
        target = self._prefix + path
        if query:
            target += "?" + urllib.parse.urlencode({k: v for k, v in query.items()
                                                    if v is not None})
        headers = {"Authorization": f"Bearer {self.api_key}", "Accept": "text/event-stream"}
        if last_event_id:
            headers["Last-Event-ID"] = last_event_id
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        wait = self.timeout if timeout is None else timeout
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        conn = cls(self._host, self._port, timeout=wait)
        try:
            try:
                conn.request(method, target, body=data, headers=headers)
                resp = conn.getresponse()
            except (OSError, http.client.HTTPException) as e:
                raise ConnectionFailed("SANDLOOM_CONNECTION_FAILED",
                                       f"{method} {path}: {e.__class__.__name__}: {e}", 0) from e
            if resp.status != 200:
                raw = resp.read()
                self._raise(resp.status, raw)
            name: str = "message"
            eid: Optional[str] = None
            lines: List[str] = []
            while True:
                try:
                    line = resp.readline()
                except (OSError, http.client.HTTPException) as e:
                    raise ConnectionFailed("SANDLOOM_CONNECTION_FAILED",
                                           f"{path}: the stream broke: {e}", 0) from e
                if not line:
                    raise ConnectionFailed("SANDLOOM_CONNECTION_FAILED",
                                           f"{path}: the stream ended early", 0)
                text = line.decode("utf-8").rstrip("\r\n")
                if text == "":
                    if lines or name != "message":
                        yield name, eid, json.loads("\n".join(lines)) if lines else None
                        if name == "end":
                            return
                    name, eid, lines = "message", None, []
                elif text.startswith(":"):
                    continue
                else:
                    field, _, value = text.partition(":")
                    value = value[1:] if value.startswith(" ") else value
                    if field == "event":
                        name = value
                    elif field == "id":
                        eid = value
                    elif field == "data":
                        lines.append(value)
        finally:
            conn.close()

    def _raise(self, status: int, raw: bytes) -> None:
        try:
            doc = json.loads(raw) if raw else {}
        except ValueError:
            doc = {"detail": raw.decode("utf-8", "replace")}
        detail = doc.get("detail") if isinstance(doc, dict) else None
        if isinstance(detail, dict):
            code = str(detail.get("code") or f"HTTP_{status}")
            message = str(detail.get("message") or code)
        else:
            code = str(detail) if detail else f"HTTP_{status}"
            message = code
        raise error_for(code, message, status)

    # -- the service's own routes -------------------------------------------
    def tenant(self) -> JSON:
        """Who the API key is: its tenant and quotas (GET /api/v1/tenant)."""
        return self.request("GET", "/api/v1/tenant")

    def sandboxes(self, status: Optional[str] = None, search: Optional[str] = None) -> List[JSON]:
        """The sandboxes this key may see (a tenant's own, by its names;
        every one for the internal token), most recently active first,
        every page of GET /api/v1/sandboxes."""
        out: List[JSON] = []
        while True:
            query: Dict[str, Any] = {"limit": 200, "offset": len(out)}
            if status:
                query["status"] = status
            if search:
                query["search"] = search
            page = self.request("GET", "/api/v1/sandboxes?" + urllib.parse.urlencode(query))
            items = list(page.get("sandboxes", []))
            out.extend(items)
            if not items or len(out) >= int(page.get("total", 0)):
                return out

    def templates(self) -> List[JSON]:
        """The template catalog, by name (a tenant: the public templates
        and its own, each with its "visibility")."""
        return list(self.request("GET", "/api/v1/templates").get("templates", []))

    def remove_template(self, name: str) -> bool:
        """Unpublish a template; False when there was none by that name."""
        r = self.request("DELETE", "/api/v1/templates/" + urllib.parse.quote(name, safe=""))
        return r.get("status") == "REMOVED"
