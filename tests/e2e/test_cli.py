"""The CLI `sandloom` (issue 14, item 4) driven as a user would, against a
real daemon on real sandboxes: names, never generations; a command's output
on the terminal and its exit code as the CLI's; files both ways; errors as
one line with the service's stable code; --json for scripts; flags, the
environment and a config file; a tenant's key sees only its tenant."""

import json
import os
import re
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from conftest import find_binary

CLI = find_binary().parent / "sandloom"
ADMIN = "/api/v1/admin/tenants"


@pytest.fixture(scope="module")
def run(daemon, tmp_path_factory):
    home = tmp_path_factory.mktemp("cli-home")

    def run(*args, key=None, env=None, input=None, check=None):
        full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
                "SANDLOOM_URL": f"http://127.0.0.1:{daemon.port}",
                "SANDLOOM_API_KEY": daemon.token if key is None else key}
        full.update(env or {})
        r = subprocess.run([str(CLI), *args], capture_output=True, env=full, input=input,
                           timeout=120)
        if check is not None:
            assert r.returncode == check, (args, r.returncode, r.stdout, r.stderr)
        return r
    return run


def name():
    return "cli-" + uuid.uuid4().hex[:10]


def one_error_line(r, code):
    lines = r.stderr.decode().splitlines()
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert len(lines) == 1 and lines[0].startswith(f"sandloom: {code}: "), lines
    return lines[0]


def test_help_names_every_command(run):
    r = run("--help", check=0)
    text = r.stdout.decode()
    for cmd in ("create", "info", "rm", "suspend", "resume", "exec", "shell", "cat", "ls", "cp",
                "SANDLOOM_URL", "SANDLOOM_API_KEY", "--json"):
        assert cmd in text, cmd
    assert run().returncode == 2
    r = run("frobnicate", "x")
    assert r.returncode == 2 and b"unknown command 'frobnicate'" in r.stderr


def test_a_session_by_name(run, tmp_path):
    sb = name()
    r = run("create", sb, check=0)
    assert r.stdout.decode().startswith(f"{sb}\tREADY\tgeneration "), r.stdout
    # A command's streams stay apart, its exit code is the CLI's.
    r = run("exec", sb, "--", "sh", "-c", "echo out; echo err >&2; exit 3", check=3)
    assert r.stdout == b"out\n" and r.stderr == b"err\n", r
    run("exec", sb, "--", "true", check=0)
    run("exec", sb, "--", "sh", "-c", "kill -9 $$", check=137)
    run("exec", "-t", "1", sb, "--", "sleep", "10", check=124)
    run("exec", sb, "--", "mkdir", "/workspace/sub", check=0)
    r = run("exec", "-C", "/workspace/sub", "-e", "GREETING=hi there", sb, "--", "sh", "-c",
            'echo "$GREETING from $(pwd)"', check=0)
    assert r.stdout == b"hi there from /workspace/sub\n", r.stdout
    # Files, both ways, bytes exactly.
    local = tmp_path / "blob.bin"
    data = bytes(range(256)) * 40
    local.write_bytes(data)
    run("cp", str(local), f"{sb}:/workspace/blob.bin", check=0)
    assert run("cat", sb, "/workspace/blob.bin", check=0).stdout == data
    back = tmp_path / "back.bin"
    run("cp", f"{sb}:/workspace/blob.bin", str(back), check=0)
    assert back.read_bytes() == data
    listing = run("ls", sb, check=0).stdout.decode()
    assert "blob.bin" in listing and str(len(data)) in listing, listing
    # Suspend keeps the files; the next command wakes it, by name alone.
    run("suspend", sb, check=0)
    assert "\tSUSPENDED\t" in run("info", sb, check=0).stdout.decode()
    r = run("exec", sb, "--", "sha256sum", "/workspace/blob.bin", check=0)
    assert r.stdout.split()[0].decode() == __import__("hashlib").sha256(data).hexdigest()
    run("suspend", sb, check=0)
    run("resume", sb, check=0)
    run("rm", sb, check=0)
    assert "\tRELEASED\t" in run("info", sb, check=0).stdout.decode()


def test_json_for_scripts(run):
    sb = name()
    doc = json.loads(run("--json", "create", sb, check=0).stdout)
    assert doc["sandbox_id"] == sb and doc["status"] == "READY", doc
    rec = json.loads(run("--json", "exec", sb, "--", "sh", "-c", "echo x; exit 4",
                         check=4).stdout)
    assert rec["status"] == "FAILED" and rec["exit_code"] == 4 and rec["stdout"] == "x\n"
    run("exec", sb, "--", "touch", "/workspace/made", check=0)
    entries = json.loads(run("--json", "ls", sb, check=0).stdout)["entries"]
    assert [e["name"] for e in entries] == ["made"], entries
    r = run("--json", "cat", sb, "/workspace/nope")
    err = json.loads(r.stdout)["error"]
    # The reference's answer to a missing file (API.md: 400, "path does not exist").
    assert err == {"code": "SANDBOX_INVALID_ARGUMENT", "message": "path does not exist",
                   "status": 400}, err
    one_error_line(r, "SANDBOX_INVALID_ARGUMENT")
    run("rm", sb, check=0)


def test_errors_are_one_line_with_the_stable_code(run, client):
    sb = name()
    r = run("info", sb)
    one_error_line(r, "SANDBOX_NOT_FOUND")
    secret = "sl" + "0" * 12 + "_" + "1" * 48
    r = run("create", sb, key=secret)
    one_error_line(r, "SANDBOX_UNAUTHORIZED")
    assert secret.encode() not in r.stdout + r.stderr
    r = run("info", sb, env={"SANDLOOM_URL": "http://127.0.0.1:9"})
    line = one_error_line(r, "CLI_UNREACHABLE")
    assert "127.0.0.1:9" in line
    # Usage mistakes are said before anything is sent (exit 2).
    for args in (("exec", sb), ("exec", sb, "--"), ("exec", "-t", "soon", sb, "--", "true"),
                 ("info", "no/slash"), ("cp", "a", "b"), ("cat", sb)):
        r = run(*args)
        assert r.returncode == 2 and r.stderr.startswith(b"sandloom: "), (args, r)


def test_the_config_file_and_what_overrides_it(run, daemon, tmp_path):
    cfg = tmp_path / "config"
    cfg.write_text(f"# mine\nurl = http://127.0.0.1:{daemon.port}\napi_key = {daemon.token}\n"
                   "scope = from-file\n")
    env = {"SANDLOOM_CONFIG": str(cfg), "SANDLOOM_URL": "", "SANDLOOM_API_KEY": ""}
    sb = name()
    doc = json.loads(run("--json", "create", sb, env=env, check=0).stdout)
    assert doc["workspace_scope_id"] == "from-file", doc
    # The environment wins over the file, a flag over both.
    r = run("--json", "info", sb, env={**env, "SANDLOOM_URL": "http://127.0.0.1:9"})
    one_error_line(r, "CLI_UNREACHABLE")
    r = run("--url", f"http://127.0.0.1:{daemon.port}", "info", sb,
            env={**env, "SANDLOOM_URL": "http://127.0.0.1:9"}, check=0)
    # Resolving the name in another scope is refused (the scope is part of the name).
    r = run("--scope", "elsewhere", "create", sb, env=env)
    one_error_line(r, "SANDBOX_SCOPE_MISMATCH")
    run("rm", sb, env=env, check=0)
    cfg.write_text("url: nope\n")
    r = run("info", sb, env=env)
    assert r.returncode == 2 and f"{cfg}:1: expected key = value".encode() in r.stderr, r
    cfg.write_text("colour = blue\n")
    r = run("info", sb, env=env)
    assert r.returncode == 2 and b"unknown key 'colour'" in r.stderr, r


def test_a_tenant_key_sees_only_its_tenant(run, client):
    keys = []
    for _ in range(2):
        tid = "cli-" + uuid.uuid4().hex[:8]
        assert client.post(ADMIN, json={"tenant_id": tid}).status == 201
        r = client.post(f"{ADMIN}/{tid}/keys", json={"name": "cli"})
        assert r.status == 201, r
        keys.append(r.body["api_key"])
    a, b = keys
    sb = name()
    run("create", sb, key=a, check=0)
    run("exec", sb, "--", "sh", "-c", "echo mine > /workspace/who", key=a, check=0)
    # The other tenant's same name is its own, empty sandbox ...
    r = run("exec", sb, "--", "sh", "-c", "cat /workspace/who || echo none", key=b, check=0)
    assert r.stdout == b"none\n", r
    # ... and the first tenant's sandbox, seen by the second, does not exist.
    run("rm", sb, key=b, check=0)
    assert run("cat", sb, "/workspace/who", key=a, check=0).stdout == b"mine\n"
    one_error_line(run("info", "never-" + sb, key=b), "SANDBOX_NOT_FOUND")
    info = json.loads(run("--json", "info", sb, key=a, check=0).stdout)
    assert info["sandbox_id"] == sb, info
    run("rm", sb, key=a, check=0)


COMPLETION = Path(__file__).resolve().parents[2] / "contrib" / "bash-completion" / "sandloom"


def complete(*words):
    """What bash completion offers for the last of words (as typed so far)."""
    script = (f"source {COMPLETION}; COMP_WORDS=(sandloom {' '.join(map(repr, words))}); "
              f"COMP_CWORD={len(words)}; _sandloom; printf '%s\\n' \"${{COMPREPLY[@]}}\"")
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return sorted(filter(None, r.stdout.splitlines()))


def test_bash_completion_offers_what_help_lists(run, tmp_path):
    # Every command --help lists, and nothing else, is offered first ...
    listed = sorted({line.split()[0] for line in run("--help", check=0).stdout.decode()
                     .splitlines() if line.startswith("  ") and line[2:3].isalpha()})
    assert complete("") == listed, (complete(""), listed)
    assert complete("ex") == ["exec"]
    # ... after the global flags too, and the flags themselves.
    assert complete("--scope", "s1", "--json", "su") == ["suspend"]
    assert complete("--u") == ["--url"]
    assert complete("exec", "-") == ["--", "-C", "-e", "-t"]
    # cp completes local paths.
    (tmp_path / "data.csv").write_text("x")
    assert complete("cp", f"{tmp_path}/da") == [f"{tmp_path}/data.csv"]


def test_doctor_says_which_service_which_key_and_whether_it_is_taken(run, client, tmp_path):
    r = run("doctor", check=0)
    out = r.stdout.decode()
    assert "ok   url " in out and "(from SANDLOOM_URL)" in out, out
    assert "ok   key       set (from SANDLOOM_API_KEY" in out, out
    assert "ok   auth      accepted: the operator's internal token" in out, out
    tid = "doc-" + uuid.uuid4().hex[:8]
    assert client.post(ADMIN, json={"tenant_id": tid}).status == 201
    key = client.post(f"{ADMIN}/{tid}/keys", json={"name": "d"}).body["api_key"]
    doc = json.loads(run("--json", "doctor", key=key, check=0).stdout)
    assert doc["ok"] is True and doc["tenant"]["tenant_id"] == tid, doc
    assert key not in json.dumps(doc)
    # Each way to be wrong is a FAIL line and exit 1.
    r = run("doctor", key="")
    assert r.returncode == 1 and "FAIL key       none: set SANDLOOM_API_KEY" in r.stdout.decode()
    r = run("doctor", key="sl" + "0" * 12 + "_" + "1" * 48)
    assert r.returncode == 1 and "FAIL auth      SANDBOX_UNAUTHORIZED" in r.stdout.decode(), r
    r = run("doctor", env={"SANDLOOM_URL": "http://127.0.0.1:9"})
    assert r.returncode == 1 and "FAIL service   CLI_UNREACHABLE" in r.stdout.decode(), r
    cfg = tmp_path / "config"
    cfg.write_text("url = http://127.0.0.1:9\n")
    r = run("doctor", env={"SANDLOOM_CONFIG": str(cfg), "SANDLOOM_URL": ""})
    assert f"(from {cfg})" in r.stdout.decode(), r.stdout


def test_admin_tenants_quotas_and_keys(run, client):
    tid = "adm-" + uuid.uuid4().hex[:8]
    r = run("admin", "tenants", "create", tid, "sandboxes=2", "running_sessions=1", check=0)
    assert r.stdout.decode() == f"{tid}\tquotas running_sessions=1 sandboxes=2\n", r.stdout
    assert f"{tid}\tquotas " in run("admin", "tenants", check=0).stdout.decode()
    shown = json.loads(run("--json", "admin", "tenants", "show", tid, check=0).stdout)
    assert shown["usage"]["sandboxes"] == 0 and shown["quotas"]["sandboxes"] == 2, shown
    r = run("admin", "quotas", tid, "sandboxes=none", "commands_in_flight=3", check=0)
    assert r.stdout.decode() == f"{tid}\tquotas commands_in_flight=3 running_sessions=1\n", r
    # A bad limit is the service's 422, named; a bad value is said before sending.
    one_error_line(run("admin", "quotas", tid, "colours=3"), "SANDBOX_INVALID_REQUEST")
    assert run("admin", "quotas", tid, "sandboxes=-1").returncode == 2
    one_error_line(run("admin", "tenants", "create", tid), "TENANT_EXISTS")

    # A key: alone on stdout (a script captures it), usable at once.
    r = run("admin", "keys", tid, "create", "ci", check=0)
    key = r.stdout.decode().strip()
    key_id = key.split("_")[0]
    assert re.fullmatch(r"sl[0-9a-f]{12}_[0-9a-f]{48}", key), r.stdout
    assert f"key {key_id} created; it is shown only now" in r.stderr.decode()
    assert f"accepted: tenant {tid}" in run("doctor", key=key, check=0).stdout.decode()
    listing = run("admin", "keys", tid, check=0).stdout.decode()
    assert listing == f"{key_id}\tci\tactive\texpires never\n", listing
    assert key not in listing
    run("admin", "keys", tid, "create", "later", "--expires", "2999-01-01T00:00:00Z", check=0)
    assert "expires 2999-01-01T00:00:00" in run("admin", "keys", tid, check=0).stdout.decode()
    run("admin", "keys", tid, "revoke", key_id, check=0)
    one_error_line(run("info", "anything", key=key), "SANDBOX_UNAUTHORIZED")
    # A tenant's key is no operator.
    other = run("admin", "keys", tid, "create", "x", check=0).stdout.decode().strip()
    one_error_line(run("admin", "tenants", key=other), "TENANT_FORBIDDEN")
    for args in (("admin",), ("admin", "tenants", "show"), ("admin", "keys", "Bad_Id"),
                 ("admin", "keys", tid, "create"), ("admin", "quotas", tid, "sandboxes")):
        assert run(*args).returncode == 2, args


def make_tree(root):
    (root / "sub").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "a.txt").write_text("alpha\n")
    (root / "sub" / "b.bin").write_bytes(os.urandom(2 * 1024 * 1024))
    (root / "link").symlink_to("a.txt")


def tree_of(root):
    """Every regular file and directory under root, with the files' bytes."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_symlink():
            out[str(p.relative_to(root))] = "link"
        elif p.is_dir():
            out[str(p.relative_to(root))] = "dir"
        else:
            out[str(p.relative_to(root))] = p.read_bytes()
    return out


def test_cp_copies_directories_both_ways_and_leaves_links(run, tmp_path):
    sb = name()
    run("create", sb, check=0)
    src = tmp_path / "src"
    make_tree(src)
    r = run("cp", str(src), f"{sb}:/workspace/tree")
    assert r.returncode == 2 and b"is a directory (cp -r copies directories)" in r.stderr, r
    r = run("cp", "-r", str(src), f"{sb}:/workspace/tree", check=0)
    assert f"left {src}/link".encode() in r.stderr, r.stderr
    # No terminal, no progress line.
    assert b"MiB" not in r.stderr, r.stderr
    listing = run("exec", sb, "--", "sh", "-c",
                  "cd /workspace/tree && find . | sort && sha256sum sub/b.bin", check=0)
    assert listing.stdout.decode().splitlines()[:6] == [
        ".", "./a.txt", "./empty", "./sub", "./sub/b.bin",
        __import__("hashlib").sha256((src / "sub" / "b.bin").read_bytes()).hexdigest()
        + "  sub/b.bin"], listing.stdout
    # A link made inside the sandbox is not followed on the way out either.
    run("exec", sb, "--", "ln", "-s", "/etc/passwd", "/workspace/tree/out-link", check=0)
    back = tmp_path / "back"
    r = run("cp", "-r", f"{sb}:/workspace/tree", str(back), check=0)
    assert b"left /workspace/tree/out-link (a symlink)" in r.stderr, r.stderr
    want = {k: v for k, v in tree_of(src).items() if v != "link"}
    assert tree_of(back) == want
    run("rm", sb, check=0)


def test_cp_pages_through_a_long_listing(sandloomd_binary, daemon_factory, tmp_path):
    d = daemon_factory({"SANDBOX_MAX_LIST_ENTRIES": "5"})
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
           "SANDLOOM_URL": f"http://127.0.0.1:{d.port}", "SANDLOOM_API_KEY": d.token}

    def cli(*args):
        r = subprocess.run([str(CLI), *args], capture_output=True, env=env, timeout=120)
        assert r.returncode == 0, (args, r)
        return r
    cli("create", "pages")
    cli("exec", "pages", "--", "sh", "-c",
        "mkdir /workspace/many && for i in $(seq 12); do echo $i > /workspace/many/f$i; done")
    cli("cp", "-r", "pages:/workspace/many", str(tmp_path / "many"))
    got = sorted(p.name for p in (tmp_path / "many").iterdir())
    assert got == sorted(f"f{i}" for i in range(1, 13)), got
    assert (tmp_path / "many" / "f12").read_text() == "12\n"


def test_cp_shows_progress_on_a_terminal(daemon, tmp_path):
    sb = name()
    src = tmp_path / "src"
    make_tree(src)
    sock = "sl-cli-" + uuid.uuid4().hex[:8]
    env = (f"SANDLOOM_URL=http://127.0.0.1:{daemon.port} SANDLOOM_API_KEY={daemon.token} "
           f"HOME={tmp_path}")
    script = (f"env {env} {CLI} create {sb} >/dev/null && "
              f"env {env} {CLI} cp -r {src} {sb}:/workspace/t 2>/dev/null; "
              f"env {env} {CLI} cp -r {sb}:/workspace/t {tmp_path}/out; echo done:$?; sleep 60")
    subprocess.run(["tmux", "-L", sock, "new-session", "-d", "-x", "200", "-y", "40", script],
                   check=True, timeout=30)
    try:
        pane = ""
        deadline = __import__("time").monotonic() + 60
        while "done:" not in pane and __import__("time").monotonic() < deadline:
            __import__("time").sleep(0.2)
            pane = subprocess.run(["tmux", "-L", sock, "capture-pane", "-p"],
                                  capture_output=True, text=True, timeout=30).stdout
        assert "done:0" in pane, pane
        # The last state of the progress line: every byte and file done.
        assert "sandloom cp: 2.0 / 2.0 MiB, 2 / 2 files" in pane, pane
    finally:
        subprocess.run(["tmux", "-L", sock, "kill-server"], capture_output=True, timeout=30)
        run_rm = subprocess.run([str(CLI), "rm", sb], capture_output=True, timeout=60,
                                env={"SANDLOOM_URL": f"http://127.0.0.1:{daemon.port}",
                                     "SANDLOOM_API_KEY": daemon.token, "PATH": "/usr/bin:/bin"})
        assert run_rm.returncode == 0, run_rm


def test_templates_publish_attach_list_and_remove(run):
    builder, user = name(), name()
    tpl = "tool-" + uuid.uuid4().hex[:8]
    run("create", builder, check=0)
    run("exec", builder, "--", "sh", "-c", f"mkdir -p /envs/{tpl} && echo v1 > /envs/{tpl}/VERSION",
        check=0)
    r = run("templates", "publish", builder, tpl, f"/envs/{tpl}", check=0)
    fields = r.stdout.decode().split("\t")
    assert fields[0] == tpl and fields[1].startswith("sha256:"), r.stdout
    digest = fields[1]
    assert f"{tpl}\t{digest}\t" in run("templates", "ls", check=0).stdout.decode()
    r = run("templates", "attach", user, f"{tpl}@{digest}", check=0)
    assert r.stdout.decode() == f"{tpl}\t{digest}\t/envs/{tpl}\n", r.stdout
    assert run("exec", user, "--", "cat", f"/envs/{tpl}/VERSION", check=0).stdout == b"v1\n"
    run("templates", "rm", tpl, check=0)
    assert f"{tpl}\t" not in run("templates", "ls", check=0).stdout.decode()
    one_error_line(run("templates", "attach", user, tpl), "SANDBOX_INVALID_ARGUMENT")
    assert run("templates", "publish", builder, "Bad Name").returncode == 2
    for sb in (builder, user):
        run("rm", sb, check=0)


def test_ls_lists_the_sandboxes_a_key_may_see_and_pages_a_directory(run, client):
    """`sandloom ls`: a tenant's own sandboxes by their names, the operator's
    all; `ls NAME` lists a directory past one page of the File API."""
    tid = "ls-" + uuid.uuid4().hex[:8]
    assert client.post(ADMIN, json={"tenant_id": tid}).status == 201
    key = client.post(f"{ADMIN}/{tid}/keys", json={"name": "ls"}).body["api_key"]
    mine = sorted(name() for _ in range(2))
    for sb in mine:
        run("create", sb, key=key, check=0)
    lines = run("ls", key=key, check=0).stdout.decode().splitlines()
    assert sorted(line.split("\t")[0] for line in lines) == mine, lines
    assert all("\tREADY\tgeneration 1\tscope default" in line for line in lines), lines
    doc = json.loads(run("--json", "ls", key=key, check=0).stdout)
    assert doc["total"] == 2 and {s["sandbox_id"] for s in doc["sandboxes"]} == set(mine)
    ops = json.loads(run("--json", "ls", check=0).stdout)
    assert {f"{tid}~{sb}" for sb in mine} <= {s["sandbox_id"] for s in ops["sandboxes"]}
    # A directory of 1,100 entries: more than one page, every one listed.
    run("exec", mine[0], "--", "sh", "-c",
        "mkdir /workspace/many && cd /workspace/many && seq -w 1 1100 | xargs touch",
        key=key, check=0)
    listed = run("ls", mine[0], "/workspace/many", key=key, check=0).stdout.decode().splitlines()
    assert len(listed) == 1100 and listed[0].endswith(" 0001") and listed[-1].endswith(" 1100")
    for sb in mine:
        run("rm", sb, key=key, check=0)


def test_exec_prints_output_as_the_command_produces_it(daemon, run):
    """`sandloom exec` follows the command's event stream: the first line
    is on the terminal while the command still runs, stdout and stderr
    stay apart, bytes that are not UTF-8 come through as they are, and the
    exit status is the command's."""
    sb = name()
    run("exec", sb, "--", "true", check=0)  # makes the sandbox
    full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/nonexistent",
            "SANDLOOM_URL": f"http://127.0.0.1:{daemon.port}", "SANDLOOM_API_KEY": daemon.token}
    p = subprocess.Popen([str(CLI), "exec", sb, "--", "sh", "-c",
                          "echo first; printf 'e\\n' >&2; sleep 2; printf '\\377\\n'; exit 4"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full)
    t0 = time.monotonic()
    first = p.stdout.readline()
    assert first == b"first\n" and time.monotonic() - t0 < 1.8, (first, time.monotonic() - t0)
    rest, err = p.communicate(timeout=60)
    assert rest == b"\xff\n"
    assert err == b"e\n"
    assert p.returncode == 4
    # --json: the record, once, as before.
    r = run("--json", "exec", sb, "--", "sh", "-c", "echo hi", check=0)
    assert json.loads(r.stdout)["stdout"] == "hi\n"


def test_shell_reads_a_script_from_a_pipe_and_exits_with_its_code(run):
    sb = name()
    run("create", sb, check=0)
    r = run("shell", sb, input=b"echo piped-$((6*7))\ncd /workspace && touch from-shell\nexit 3\n")
    assert r.returncode == 3, (r.returncode, r.stdout, r.stderr)
    assert b"piped-42" in r.stdout
    assert run("ls", sb, "/workspace", check=0).stdout.count(b"from-shell") == 1
    # A terminal that is not there: one line with its code.
    one_error_line(run("shell", sb, "--attach", "terminal-nosuch"), "EXEC_NOT_FOUND")
    run("rm", sb, check=0)


def tmux(sock, *args):
    return subprocess.run(["tmux", "-L", sock, *args], capture_output=True, text=True, timeout=30)


def wait_pane(sock, pattern, timeout=30):
    deadline = time.monotonic() + timeout
    pane = ""
    while time.monotonic() < deadline:
        pane = tmux(sock, "capture-pane", "-p").stdout
        if re.search(pattern, pane):
            return pane
        time.sleep(0.2)
    raise AssertionError(f"{pattern!r} not in the pane:\n{pane}")


def test_shell_on_a_real_terminal_follows_its_size_and_gives_it_back(daemon, run, tmp_path):
    sb = name()
    run("create", sb, check=0)
    sock = "sl-sh-" + uuid.uuid4().hex[:8]
    env = (f"SANDLOOM_URL=http://127.0.0.1:{daemon.port} SANDLOOM_API_KEY={daemon.token} "
           f"HOME={tmp_path}")
    # After the shell: the code, and whether the local terminal is cooked again.
    script = (f"env {env} {CLI} shell {sb}; echo shell-exit:$?; "
              f"stty -a | grep -o -- '-\\?icanon' | head -1 | sed 's/^/mode:/'; sleep 60")
    tmux(sock, "new-session", "-d", "-x", "120", "-y", "40", script)
    try:
        wait_pane(sock, r"workspace#")
        tmux(sock, "send-keys", "stty size", "Enter")
        wait_pane(sock, r"(?m)^40 120$")
        tmux(sock, "resize-window", "-x", "90", "-y", "30")
        time.sleep(0.5)
        tmux(sock, "send-keys", "clear; stty size", "Enter")
        wait_pane(sock, r"(?m)^30 90$")
        # ^C reaches the sandbox's job, not the CLI.
        tmux(sock, "send-keys", "sleep 100", "Enter")
        time.sleep(0.5)
        tmux(sock, "send-keys", "C-c", "")
        tmux(sock, "send-keys", "echo after-$?", "Enter")
        wait_pane(sock, r"after-130")
        tmux(sock, "send-keys", "exit 5", "Enter")
        pane = wait_pane(sock, r"mode:")
        assert "shell-exit:5" in pane, pane
        assert "mode:icanon" in pane, pane
    finally:
        tmux(sock, "kill-server")
        run("rm", sb)
