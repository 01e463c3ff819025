"""A throwaway sandloomd for the Python benches: a free loopback port, the
caller's state directory, SQLite, a uid range of its own, a token of its
own; stopped by stop(). Not a test harness: it exits the bench on failure."""
import json
import os
import socket
import subprocess
import sys
import time
import http.client
import uuid

TOKEN = "bench-" + uuid.uuid4().hex + uuid.uuid4().hex


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    def __init__(self, build, state, uid, uids=1000, **env_extra):
        """env_extra: further SANDBOX_* settings (values as strings)."""
        self.port = free_port()
        os.makedirs(state, exist_ok=True)
        env = dict(os.environ, SANDBOX_HOST="127.0.0.1", SANDBOX_PORT=str(self.port),
                   SANDBOX_ADVERTISE_HOST="127.0.0.1", SANDBOX_LOCAL_ROOT=f"{state}/sandboxes",
                   SANDBOX_DATABASE_URL=f"sqlite:///{state}/db.sqlite",
                   SANDBOX_STARTUP_LOG_PATH=f"{state}/startup.log",
                   SANDBOX_INTERNAL_TOKEN=TOKEN, SANDBOX_UID_START=str(uid),
                   SANDBOX_UID_END=str(uid + uids - 1),
                   SANDBOX_AUTH_FAILURES_PER_MINUTE="1000000", **env_extra)
        self.p = subprocess.Popen([os.path.join(build, "sandloomd")], env=env,
                                  stdout=subprocess.DEVNULL, stderr=open(f"{state}/stderr", "w"))
        deadline = time.time() + 30
        while True:
            if self.p.poll() is not None:
                sys.exit(f"bench: sandloomd exited ({state}/stderr)")
            try:
                if self.request("GET", "/health")[1] == b"ok":
                    break
            except OSError:
                pass
            if time.time() > deadline:
                sys.exit("bench: sandloomd did not come up")
            time.sleep(0.05)

    def request(self, method, path, body=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        try:
            c.request(method, path, body=json.dumps(body) if body is not None else None,
                      headers={"Authorization": "Bearer " + TOKEN,
                               "Content-Type": "application/json"})
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def json(self, method, path, body=None):
        status, raw = self.request(method, path, body)
        if status not in (200, 201):
            sys.exit(f"bench: {method} {path}: {status} {raw[:300]!r}")
        return json.loads(raw)

    def sandbox(self):
        """A new sandbox, created: (id, generation)."""
        sid = "sb-" + uuid.uuid4().hex[:12]
        r = self.json("POST", "/api/v1/sandboxes/resolve",
                      {"sandbox_id": sid, "workspace_scope_id": "scope-" + sid})
        self.json("POST", f"/api/v1/sandboxes/{sid}", {"generation": r["generation"]})
        return sid, r["generation"]

    def rss_kib(self):
        with open(f"/proc/{self.p.pid}/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))

    def threads(self):
        return len(os.listdir(f"/proc/{self.p.pid}/task"))

    def stop(self):
        self.p.terminate()
        try:
            self.p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
