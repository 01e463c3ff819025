"""Execution semantics: API.md §3.9, §4.2–§4.5, RUNTIME.md §4–§7."""

import os
import time
import uuid

from sandloom_client import assert_error, assert_invalid

# RUNTIME.md §5, default toolchains python,node.
DEFAULT_PATH = ("/opt/agent-sandbox/python-runtime/bin:/envs/uv-tools/bin:/envs/python-venv/bin:"
                "/envs/npm-global/bin:/envs/pnpm:/home/sandbox/.local/bin:/usr/local/bin:"
                "/usr/bin:/bin")
# The reference's seven fields plus ours, additive: termination_reason
# (null, "TIMED_OUT" or "OOM_KILLED").
EXEC_FIELDS = {"exec_id", "status", "exit_code", "stdout", "stderr", "duration_ms", "truncated",
               "termination_reason", "session_idle_stop_at", "idle_release_at"}


def sandbox_processes(uid, needle):
    """Host processes owned by the sandbox uid whose command line contains needle."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid:
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if needle in cmd:
            found.append((int(pid), cmd.replace(b"\0", b" ").decode(errors="replace")))
    return found


def run(sb, argv, **kw):
    r = sb.exec(argv, **kw)
    assert r.status == 200, r
    # A replay (an exec_id used before) adds "replayed" and may add warnings.
    extra = {"replayed", "warnings"} if r.body.get("replayed") is True else set()
    assert EXEC_FIELDS <= set(r.body) <= EXEC_FIELDS | extra, f"exec response fields: {r.body!r}"
    return r.body


def test_nonzero_exit_is_propagated(ready_sandbox):
    b = run(ready_sandbox, ["sh", "-c", "exit 7"])
    assert b["status"] == "FAILED" and b["exit_code"] == 7, b
    b = run(ready_sandbox, ["true"])
    assert b["status"] == "SUCCEEDED" and b["exit_code"] == 0, b


def test_stdout_and_stderr_are_separate(ready_sandbox):
    b = run(ready_sandbox, ["sh", "-c", "echo to-out; echo to-err >&2; echo more-out"])
    assert b["status"] == "SUCCEEDED", b
    assert b["stdout"] == "to-out\nmore-out\n", b
    assert b["stderr"] == "to-err\n", b
    assert b["truncated"] is False


def test_path_identical_in_plain_and_login_shell(ready_sandbox):
    plain = run(ready_sandbox, ["sh", "-c", "echo $PATH"])
    login = run(ready_sandbox, ["sh", "-lc", "echo $PATH"])
    assert plain["status"] == login["status"] == "SUCCEEDED", (plain, login)
    assert plain["stdout"] == login["stdout"], \
        f"PATH differs: sh -c {plain['stdout']!r} vs sh -lc {login['stdout']!r}"
    assert plain["stdout"].strip() == DEFAULT_PATH


def test_identity_home_and_environment(ready_sandbox):
    b = run(ready_sandbox, ["sh", "-c", "echo $HOME; id -u; pwd; echo $LANG; echo $TMPDIR"])
    assert b["status"] == "SUCCEEDED", b
    # Root of the sandbox's own user namespace; under gVisor on the host's
    # network stack (private, host) there is none and commands run as the
    # sandbox's uid itself (docs/GVISOR.md).
    caps = ready_sandbox.c.get("/healthz").body["worker"]["capabilities"]
    own_uid = caps["execution_backend"]["name"] == "gvisor" and caps["network_mode"] != "isolated"
    uid = str(ready_sandbox.uid) if own_uid else "0"
    assert b["stdout"].splitlines() == ["/home/sandbox", uid, "/workspace", "C.UTF-8", "/tmp"], b


def test_no_host_environment_leaks(ready_sandbox):
    # The daemon runs with SANDBOX_* variables; none may be visible inside.
    b = run(ready_sandbox, ["sh", "-c", "env"])
    assert b["status"] == "SUCCEEDED", b
    assert "SANDBOX_" not in b["stdout"], b["stdout"]


def test_caller_env_and_cwd(ready_sandbox):
    sb = ready_sandbox
    assert sb.mkdir("/workspace/sub").status == 200
    b = run(sb, ["sh", "-c", "echo $MY_VAR; pwd"], env={"MY_VAR": "hello-env"},
            cwd="/workspace/sub")
    assert b["status"] == "SUCCEEDED", b
    assert b["stdout"] == "hello-env\n/workspace/sub\n", b


def test_exec_id_replay_returns_stored_record(ready_sandbox):
    exec_id = "replay-" + uuid.uuid4().hex
    first = run(ready_sandbox, ["sh", "-c", "echo first; echo e1 >&2; exit 3"], exec_id=exec_id)
    assert first["exec_id"] == exec_id
    assert first["status"] == "FAILED" and first["exit_code"] == 3, first
    assert isinstance(first["duration_ms"], int) and first["duration_ms"] >= 0, first
    # Different argv, same id: the stored record comes back, nothing runs.
    again = run(ready_sandbox, ["sh", "-c", "echo second > /workspace/replayed"],
                exec_id=exec_id)
    assert again["exec_id"] == exec_id
    assert (again["status"], again["exit_code"], again["stdout"], again["stderr"]) == \
        ("FAILED", 3, "first\n", "e1\n"), again
    assert again["duration_ms"] is None, "a replay answers duration_ms null"
    r = ready_sandbox.read("/workspace/replayed")
    assert r.status == 400, f"the replayed command must not have run: {r!r}"


def test_reserved_env_is_a_failed_record(ready_sandbox):
    b = run(ready_sandbox, ["true"], env={"PATH": "/evil"})
    assert b["status"] == "FAILED", b
    assert b["exit_code"] is None, b
    assert b["stderr"].startswith(
        "ValueError: this environment variable is sandbox-managed and cannot be overridden: PATH"), b
    for name in ("LD_PRELOAD", "PYTHONPATH", "HOME"):
        b = run(ready_sandbox, ["true"], env={name: "x"})
        assert b["status"] == "FAILED" and b["exit_code"] is None, (name, b)
        assert b["stderr"].startswith(
            "ValueError: this environment variable is sandbox-managed and cannot be overridden: "), b


def test_invalid_env_name_is_a_failed_record(ready_sandbox):
    b = run(ready_sandbox, ["true"], env={"1BAD": "x"})
    assert b["status"] == "FAILED" and b["exit_code"] is None, b
    assert b["stderr"].startswith("ValueError: invalid environment variable name"), b


def test_sensitive_env_refused(ready_sandbox):
    secret = "SECRET-" + uuid.uuid4().hex
    r = ready_sandbox.exec(["true"], sensitive_env={"API_KEY": secret})
    assert_error(r, 400, "SANDBOX_INVALID_ARGUMENT",
                 prefix="sensitive environment variables not supported")
    assert secret.encode() not in r.raw, "the secret value was echoed"


def test_cwd_outside_workspace_is_422(ready_sandbox):
    for cwd in ("/etc", "/workspacefoo", "/workspace/../etc", "/workspace/a/../../etc", "tmp"):
        assert_invalid(ready_sandbox.exec(["pwd"], cwd=cwd), "cwd")


def test_argv_validation(ready_sandbox):
    assert_invalid(ready_sandbox.exec([]), "argv")
    assert_invalid(ready_sandbox.exec(["echo", "a\u0000b"]), "argv")
    assert_invalid(ready_sandbox.exec(["x"] * 257), "argv")
    assert_invalid(ready_sandbox.exec("echo hi"), "argv")


def test_timeout_and_exec_field_validation(ready_sandbox):
    assert_invalid(ready_sandbox.exec(["true"], timeout_seconds=0), "timeout_seconds")
    assert_invalid(ready_sandbox.exec(["true"], timeout_seconds=86401), "timeout_seconds")
    assert_invalid(ready_sandbox.exec(["true"], exec_id="a b"), "exec_id")
    assert_invalid(ready_sandbox.exec(["true"], exec_id="ab"), "exec_id")
    assert_invalid(ready_sandbox.exec(["true"], exec_scope="bad scope"), "exec_scope")
    assert_invalid(ready_sandbox.exec(["true"], env={"K": 1}), "env")


def test_timeout_kills_the_command(ready_sandbox):
    t0 = time.monotonic()
    b = run(ready_sandbox, ["sleep", "5"], timeout_seconds=1)
    elapsed = time.monotonic() - t0
    assert b["status"] == "TIMED_OUT", b
    assert elapsed < 4.5, f"timeout 1 s but the call took {elapsed:.1f} s"
    # The command's process tree is gone (no stray `sleep 5` of the sandbox uid).
    deadline = time.monotonic() + 3
    while True:
        left = sandbox_processes(ready_sandbox.uid, b"sleep")
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert not left, f"processes of the timed-out command survive: {left}"
    # The route is usable again afterwards.
    r = ready_sandbox.route()
    assert r.status == 200 and r.body["status"] == "READY", r
    b = run(ready_sandbox, ["true"])
    assert b["status"] == "SUCCEEDED", b


def test_unknown_command_fails_without_hanging(ready_sandbox):
    b = run(ready_sandbox, ["definitely-not-a-command-" + uuid.uuid4().hex[:8]])
    assert b["status"] == "FAILED", b
    assert b["exit_code"] != 0, b


def test_output_bytes_are_preserved(ready_sandbox):
    """stdout/stderr are decoded as UTF-8 with U+FFFD replacement; a NUL byte
    is ordinary data and must not cut the stream short (API.md §4.2)."""
    exec_id = "bytes-" + uuid.uuid4().hex[:8]
    b = run(ready_sandbox, ["sh", "-c", "printf 'a\\000b\\377c\\n'; printf '\\303\\251\\n' >&2"],
            exec_id=exec_id)
    assert b["status"] == "SUCCEEDED", b
    assert b["stdout"] == "a\u0000b\ufffdc\n", f"stdout mangled: {b['stdout']!r}"
    assert b["stderr"] == "\u00e9\n", f"stderr mangled: {b['stderr']!r}"
    again = run(ready_sandbox, ["true"], exec_id=exec_id)
    # PostgreSQL's text cannot hold a NUL byte: the stored record has U+FFFD
    # in its place (docs/ARCHITECTURE.md, the store); the answer of the run
    # itself, above, keeps it on every backend.
    on_postgres = os.environ.get("SANDLOOM_TEST_DATABASE_URL", "").startswith("postgres")
    stored = "a\ufffdb\ufffdc\n" if on_postgres else "a\u0000b\ufffdc\n"
    assert again["stdout"] == stored, f"stored stdout mangled: {again['stdout']!r}"


def test_unicode_and_newlines_in_argv_and_env(ready_sandbox):
    b = run(ready_sandbox, ["sh", "-c", 'printf "%s|%s" "$1" "$V"', "sh", "h\u00e9llo \u2713 $HOME"],
            env={"V": "line1\nline2 \u00fc"})
    assert b["status"] == "SUCCEEDED", b
    assert b["stdout"] == "h\u00e9llo \u2713 $HOME|line1\nline2 \u00fc", b


def test_stdin_is_not_connected(ready_sandbox):
    t0 = time.monotonic()
    b = run(ready_sandbox, ["cat"], timeout_seconds=10)
    assert b["status"] == "SUCCEEDED" and b["stdout"] == "", b
    assert time.monotonic() - t0 < 5, "cat waited for stdin: it must see EOF at once"
