"""E2B's protocol in a fleet (docs/E2B.md, ARCHITECTURE.md §8b): two replicas
over PostgreSQL and Redis, and every E2B request sent to the one that does
not hold the sandbox. The create is placed by the fleet (here on the other
replica) and made there over the worker protocol; control-plane calls,
envd's Connect RPCs and /files, and the code interpreter reach the owner
as they came (a raw relay) and its answers come back, streams as they
come. E2B's own JavaScript SDK (npm `e2b` 2.51.0 and
`@e2b/code-interpreter`, pinned in tests/e2e/e2b_sdk) makes the calls."""
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from test_e2b_sdk import e2b_key, install_sdks
from test_forwarding import fleet
from test_mcp_sdk import _tail

DRIVER = Path(__file__).resolve().parent / "e2b_fleet.mjs"


@pytest.fixture(scope="module")
def sdk_dir(tmp_path_factory):
    work = tmp_path_factory.mktemp("e2b-fleet-sdk")
    install_sdks(work, DRIVER)
    return work


def e2b(daemon, key, method, path, body=None):
    """One control-plane call (a POST always with a JSON body, as the SDK's)."""
    kw = {"json_body": body or {}} if method == "POST" else {}
    return daemon.client().request(method, path, auth=False, headers={"X-API-KEY": key}, **kw)


def create_on_the_other(a, b, tid, key):
    """E2B creates sent to a until the fleet places one on b (placement
    takes the least loaded worker by the last heartbeats: a sandbox placed
    on a makes the next one b's). Every create succeeds, wherever placed."""
    for _ in range(8):
        r = e2b(a, key, "POST", "/sandboxes", {"templateID": "base", "timeout": 300})
        assert r.status == 201, (r, _tail(a.stderr()))
        sid = r.body["sandboxID"]
        stored = f"{tid}~{sid}"
        if (b.sandbox_root / stored).is_dir():
            assert not (a.sandbox_root / stored).exists()
            return sid, stored
        assert (a.sandbox_root / stored).is_dir(), r
        time.sleep(1.2)
    pytest.fail("no create sent to one replica was placed on the other")


def test_every_e2b_request_through_the_replica_that_does_not_hold_the_sandbox(
        daemon_factory, sdk_dir):
    a, b = fleet(daemon_factory)
    tid, key = e2b_key(a.client())
    sid, stored = create_on_the_other(a, b, tid, key)

    # The control plane through a: info, and a pause and resume done by b.
    r = e2b(a, key, "GET", f"/sandboxes/{sid}")
    assert r.status == 200 and r.body["state"] == "running", r
    assert e2b(a, key, "POST", f"/sandboxes/{sid}/pause").status == 204
    assert e2b(a, key, "GET", f"/sandboxes/{sid}").body["state"] == "paused"
    r = e2b(a, key, "POST", f"/sandboxes/{sid}/connect", {"timeout": 300})
    assert r.status == 201 and r.body["sandboxID"] == sid, r
    assert (b.sandbox_root / stored).is_dir() and not (a.sandbox_root / stored).exists()

    url = f"http://127.0.0.1:{a.port}"
    env = dict(os.environ, E2B_API_URL=url, E2B_SANDBOX_URL=url, E2B_API_KEY=key)
    env.pop("E2B_DOMAIN", None)
    p = subprocess.run(["node", DRIVER.name, sid], cwd=sdk_dir, env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, (_tail(p.stderr), _tail(a.stderr()))
    out = json.loads(p.stdout.strip().splitlines()[-1])
    where = f"--- a ---\n{_tail(a.stderr())}\n--- b ---\n{_tail(b.stderr())}"
    for name, facts in out.items():
        assert not (isinstance(facts, dict) and "thrown" in facts), (name, facts, where)

    assert out["run"] == {"stdout": "hello from /home/user\n", "stderr": "oops\n",
                          "exitCode": 0}, out["run"]
    assert out["files"]["read"] == "written through the other replica\n", out["files"]
    assert "fleet.txt" in out["files"]["list"], out["files"]
    bg = out["background"]
    assert bg["stdout"] == "out1\nout2\nout3\n" and bg["exitCode"] == 0, bg
    # Streamed through: the first line came well before the command ended.
    assert bg["chunks"][0][0] == "out1\n" and bg["chunks"][0][1] < bg["elapsed"] - 500, bg
    code = out["runCode"]
    assert code["text"] == "42" and code["stdout"] == ["streamed\n"], code
    assert code["printed"] == ["streamed\n"] and code["error"] is None, code
    assert out["info"] == {"sandboxId": sid, "state": "running"}, out["info"]
    # Sampled where the sandbox is: its files count.
    assert out["metrics"]["samples"] == 1 and out["metrics"]["diskUsed"] > 0, out["metrics"]
    assert out["kill"] is True and out["afterKill"] is False, out
    # Killed on its owner.
    assert not (b.sandbox_root / stored).exists()
    assert e2b(a, key, "GET", f"/sandboxes/{sid}").status == 404
    # a sent them on, and logged where.
    assert f"forwarded to {b.worker_id}" in a.stderr(), _tail(a.stderr())


def test_a_forwarded_e2b_request_is_never_forwarded_again(daemon_factory):
    """A request a replica sent on carries X-Sandbox-Worker-ID: the replica
    that gets it serves it itself, whoever holds the sandbox."""
    a, b = fleet(daemon_factory)
    tid, key = e2b_key(a.client())
    sid, _ = create_on_the_other(a, b, tid, key)
    r = a.client().request("GET", f"/sandboxes/{sid}/metrics", auth=False,
                           headers={"X-API-KEY": key, "X-Sandbox-Worker-ID": a.worker_id})
    # Served by a, which holds nothing of it: no disk counted.
    assert r.status == 200 and r.body[0]["diskUsed"] == 0, r
    r = e2b(a, key, "GET", f"/sandboxes/{sid}/metrics")
    assert r.status == 200 and r.body[0]["diskUsed"] > 0, r
    assert e2b(a, key, "DELETE", f"/sandboxes/{sid}").status == 204
