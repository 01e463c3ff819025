"""A client of the service's Server-Sent Events (command output streams,
file watches), for the tests: events parsed as they arrive, and a
stream's output collected with its offsets checked."""
import base64
import http.client
import json
import time


class Events:
    """One open event stream: events parsed as they arrive."""

    def __init__(self, daemon, method, path, body=None, headers=None, timeout=30):
        self.conn = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=timeout)
        hdrs = {"Authorization": "Bearer " + daemon.token, "Accept": "text/event-stream"}
        if body is not None:
            hdrs["Content-Type"] = "application/json"
        hdrs.update(headers or {})
        self.conn.request(method, path, body=json.dumps(body) if body is not None else None,
                          headers=hdrs)
        self.resp = self.conn.getresponse()
        self.status = self.resp.status
        self.headers = self.resp.headers
        self.comments = []
        self.first_at = None  # when the first event arrived (time.monotonic)

    def error(self):
        return json.loads(self.resp.read())

    def next(self):
        """The next event as (name, id, data) or None at the end."""
        name, eid, data = "message", None, []
        while True:
            line = self.resp.readline()
            if not line:
                return None
            line = line.decode("utf-8").rstrip("\r\n")
            if line == "":
                if data or name != "message":
                    if self.first_at is None:
                        self.first_at = time.monotonic()
                    return name, eid, json.loads("\n".join(data)) if data else None
                continue
            if line.startswith(":"):
                self.comments.append(line)
                continue
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                name = value
            elif field == "id":
                eid = value
            elif field == "data":
                data.append(value)

    def close(self):
        self.conn.close()


def chunk_bytes(data):
    return data["text"].encode("utf-8") if "text" in data else base64.b64decode(data["base64"])


def collect(ev, stop_after=None, start=(0, 0)):
    """Every event until the end (or until stop_after bytes of stdout), the
    stream starting at offsets `start`: (stdout bytes, stderr bytes, events)."""
    out = {"stdout": bytearray(), "stderr": bytearray()}
    base = {"stdout": start[0], "stderr": start[1]}
    events = []
    while True:
        e = ev.next()
        if e is None:
            break
        events.append(e)
        name, eid, data = e
        if name in out:
            assert data["offset"] == base[name] + len(out[name]), (name, data["offset"])
            out[name] += chunk_bytes(data)
            assert eid == f"{base['stdout'] + len(out['stdout'])}:" \
                          f"{base['stderr'] + len(out['stderr'])}"
        if name == "gap":
            # What is missing is said, and the offsets jump past it.
            assert data["offset"] == base[data["stream"]] + len(out[data["stream"]])
            base[data["stream"]] += data["skipped"]
            if stop_after is not None and len(out["stdout"]) >= stop_after:
                break
        if name == "end":
            break
    return bytes(out["stdout"]), bytes(out["stderr"]), events
