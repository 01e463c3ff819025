"""Environment templates on one worker (API.md §3.13, §6): build a tree in
one sandbox, publish it as a deterministic archive, attach it read-only at
/envs/<name> in others, the catalog rules, and a Python virtual environment
built in one sandbox running from another."""
import re
import time
import uuid

import pytest

from sandloom_client import Sandbox, assert_bad_arg, assert_error, assert_invalid

TEMPLATES = "/api/v1/templates"


def ready(client, prefix):
    sb = Sandbox(client, f"{prefix}-" + uuid.uuid4().hex[:8], "scope")
    assert sb.resolve().status == 200 and sb.connect().status == 200
    return sb


def sh(sb, script, **kw):
    r = sb.exec(["sh", "-c", script], **kw)
    assert r.status == 200, r
    return r.body


def publish(sb, name, source="/envs", **extra):
    body = {"generation": sb.generation, "name": name, "source_path": source}
    body.update(extra)
    return sb.c.post(f"{sb.path}/templates", json=body)


def attach(sb, *refs):
    return sb.c.put(f"{sb.path}/templates",
                    json={"generation": sb.generation, "templates": list(refs)})


@pytest.fixture
def name():
    return "tpl-" + uuid.uuid4().hex[:8]


def test_publish_attach_read_only_and_catalog(client, name):
    builder = ready(client, "bld")
    b = sh(builder, f"mkdir -p /envs/{name}/bin && printf '#!/bin/sh\\necho hello from {name}\\n' "
                    f"> /envs/{name}/bin/hello && chmod 755 /envs/{name}/bin/hello && "
                    f"ln -s bin/hello /envs/{name}/link && echo data > /envs/{name}/data.txt")
    assert b["status"] == "SUCCEEDED", b
    r = publish(builder, name, f"/envs/{name}", description="greeter", labels={"team": "x"})
    assert r.status == 200, r
    rec = r.body
    # The reference's fields, and ours: who may see it.
    assert set(rec) == {"name", "digest", "size_bytes", "mount_target", "created_at",
                        "description", "source_sandbox_id", "labels", "visibility"}
    assert rec["visibility"] == "public"
    assert rec["name"] == name and rec["mount_target"] == f"/envs/{name}"
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", rec["digest"]) and rec["size_bytes"] > 0
    assert rec["source_sandbox_id"] == builder.id and rec["labels"] == {"team": "x"}
    assert isinstance(rec["created_at"], float)
    # The same tree gives the same digest.
    again = publish(builder, name, f"/envs/{name}")
    assert again.status == 200 and again.body["digest"] == rec["digest"], again
    listed = client.get(TEMPLATES).body["templates"]
    assert [t for t in listed if t["name"] == name][0]["digest"] == rec["digest"]
    names = [t["name"] for t in listed]
    assert names == sorted(names)

    user = ready(client, "use")
    r = attach(user, name)
    assert r.status == 200 and r.body["status"] == "ATTACHED", r
    t = r.body["templates"][0]
    assert t["digest"] == rec["digest"] and t["local_path"], t
    out = sh(user, f"/envs/{name}/bin/hello; /envs/{name}/link; cat /envs/{name}/data.txt; "
                   f"(echo x > /envs/{name}/data.txt) 2>/dev/null || echo READ-ONLY")
    assert out["stdout"] == f"hello from {name}\nhello from {name}\ndata\nREAD-ONLY\n", out
    for sb in (builder, user):
        assert sb.release().status == 200


def test_revisions_pins_duplicates_and_unpublish(client, name):
    builder = ready(client, "rev")
    sh(builder, f"mkdir -p /envs/{name} && echo one > /envs/{name}/v")
    first = publish(builder, name, f"/envs/{name}").body["digest"]
    sh(builder, f"echo two > /envs/{name}/v")
    second = publish(builder, name, f"/envs/{name}").body["digest"]
    assert first != second, "a changed tree is a new revision"
    other = "tpl-" + uuid.uuid4().hex[:8]
    sh(builder, "mkdir -p /workspace/o && echo other > /workspace/o/f")
    assert publish(builder, other, "/workspace/o").status == 200

    user = ready(client, "pin")
    # Two templates at once, a duplicate reference collapsing, a pin of the
    # older revision.
    r = attach(user, f"{name}@{first}", other, f" {other} ")
    assert r.status == 200 and len(r.body["templates"]) == 2, r
    assert sh(user, f"cat /envs/{name}/v /envs/{other}/f")["stdout"] == "one\nother\n"
    # By name: the current revision.
    assert attach(user, name).status == 200
    assert sh(user, f"cat /envs/{name}/v")["stdout"] == "two\n"
    # Two revisions of one name: refused, naming both; the attachment stays.
    r = attach(user, f"{name}@{first}", f"{name}@{second}")
    assert_bad_arg(r)
    assert first in r.raw.decode() and second in r.raw.decode() and f"/envs/{name}" in r.raw.decode()
    assert sh(user, f"cat /envs/{name}/v")["stdout"] == "two\n"
    # Unpublish: existing mounts keep working, new attaches fail, even pinned.
    r = client.delete(f"{TEMPLATES}/{name}")
    assert r.status == 200 and r.body == {"status": "REMOVED", "name": name}, r
    r = client.delete(f"{TEMPLATES}/{name}")
    assert r.body == {"status": "NOT_FOUND", "name": name}, r
    assert sh(user, f"cat /envs/{name}/v")["stdout"] == "two\n"
    for ref in (name, f"{name}@{second}"):
        r = attach(user, ref)
        assert_bad_arg(r, f"template '{name}' is not in the catalog")
    assert sh(user, f"cat /envs/{name}/v")["stdout"] == "two\n"
    assert client.delete(f"{TEMPLATES}/{other}").status == 200
    for sb in (builder, user):
        assert sb.release().status == 200


def test_attach_into_a_live_session_keeps_background_processes(client, name):
    """Natively the trees are mounted into the running session. A gVisor
    sandbox binds them when its session starts: the attach takes effect
    with a new session, and its background processes end (docs/GVISOR.md)."""
    gvisor = client.get("/healthz").body["worker"]["capabilities"]["execution_backend"][
        "name"] == "gvisor"
    builder = ready(client, "live")
    sh(builder, f"mkdir -p /envs/{name} && echo live > /envs/{name}/f")
    assert publish(builder, name, f"/envs/{name}").status == 200
    user = ready(client, "bg")
    sh(user, "sleep 120 > /dev/null 2>&1 & echo $! > /workspace/bg.pid")
    assert attach(user, name).status == 200
    out = sh(user, f"cat /envs/{name}/f; cat /proc/[0-9]*/cmdline | tr '\\0' ' ' | "
                   f"grep -q 'sleep 12[0]' && echo ALIVE || echo GONE")
    assert out["stdout"] == ("live\nGONE\n" if gvisor else "live\nALIVE\n"), out
    for sb in (builder, user):
        assert sb.release().status == 200
    client.delete(f"{TEMPLATES}/{name}")


def test_python_venv_built_in_one_sandbox_runs_in_another(client, name):
    builder = ready(client, "venv")
    b = sh(builder, f"python3 -m venv --without-pip /envs/{name} && "
                    f"site=$(/envs/{name}/bin/python -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])') && "
                    f"printf 'def greet():\\n    return \"venv ok\"\\n' > $site/sandloom_probe.py && "
                    f"chmod -R a+rX /envs/{name}")
    assert b["status"] == "SUCCEEDED", b
    assert publish(builder, name, f"/envs/{name}").status == 200
    user = ready(client, "venvuse")
    assert attach(user, name).status == 200
    out = sh(user, f"/envs/{name}/bin/python -c 'import sys, sandloom_probe; "
                   f"print(sandloom_probe.greet(), sys.prefix)'")
    assert out["status"] == "SUCCEEDED" and out["stdout"] == f"venv ok /envs/{name}\n", out
    for sb in (builder, user):
        assert sb.release().status == 200
    client.delete(f"{TEMPLATES}/{name}")


def test_publish_and_attach_refusals(client, name):
    sb = ready(client, "ref")
    sh(sb, "mkdir -p /envs/x /workspace/w && ln -s /etc /workspace/link && touch /workspace/file")
    assert_bad_arg(publish(sb, name, "/home/sandbox"),
                   "template source path must live under /envs, /workspace")
    assert_bad_arg(publish(sb, name, "/workspace/../etc"),
                   "template source path may not contain .. or NUL")
    for src in ("/workspace/missing", "/workspace/file", "/workspace/link"):
        assert_error(publish(sb, name, src), 400, "SANDBOX_TEMPLATE_SOURCE_NOT_A_DIRECTORY")
    assert_invalid(publish(sb, "Bad_Name"))
    assert_invalid(publish(sb, "x" * 65))
    assert_invalid(sb.c.post(f"{sb.path}/templates", json={"generation": sb.generation}))
    stale = sb.c.post(f"{sb.path}/templates", json={"generation": sb.generation + 1, "name": name})
    assert_error(stale, 409, "STALE_SANDBOX_ROUTE")
    assert_bad_arg(attach(sb, f"nope-{uuid.uuid4().hex[:6]}"))
    assert_bad_arg(attach(sb, "UPPER"))
    assert_bad_arg(attach(sb, f"{name}@sha256:1234"))
    assert_invalid(sb.c.put(f"{sb.path}/templates", json={"generation": sb.generation,
                                                          "templates": []}))
    assert_invalid(sb.c.put(f"{sb.path}/templates", json={"generation": sb.generation,
                                                          "templates": ["a"] * 17}))
    assert_bad_arg(client.delete(f"{TEMPLATES}/Bad..Name"))
    # While a command runs, the sandbox cannot be snapshotted.
    sh(sb, "sleep 3", exec_id="ref-busy", background=True)
    assert_error(publish(sb, name, "/workspace/w"), 409, "SANDBOX_SHARED_WORKSPACE_LOCKED")
    deadline = time.monotonic() + 10
    while sb.route().body["status"] != "READY" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sb.release().status == 200
