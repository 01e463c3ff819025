"""Every toolchain with Debian's packages (golang-go, rustc and cargo,
default-jdk-headless, node-typescript, python3-pip; scripts/install-deps.sh
installs them for `make test`): each passes its launch check, and a
program compiles and runs in it, in a plain shell and in a login shell.
pip installs into the managed environment and python3 imports from it;
npm runs without warnings about settings it does not know."""
import json
import uuid

import pytest

from sandloom_client import Sandbox

TOOLCHAINS = "python,node,go,rust,java"

PROGRAMS = {
    "python": ("hello.py", "print('hello from python')", "python3 hello.py"),
    "node": ("hello.js", "console.log('hello from node')", "node hello.js"),
    "typescript": ("hello.ts", "const who: string = 'typescript'; console.log(`hello from ${who}`)",
                   "tsc --outDir /tmp/ts hello.ts && node /tmp/ts/hello.js"),
    "go": ("hello.go", 'package main\nimport "fmt"\nfunc main() { fmt.Println("hello from go") }',
           "go build -o /tmp/hello-go hello.go && /tmp/hello-go"),
    "rust": ("hello.rs", 'fn main() { println!("hello from rust"); }',
             "rustc -o /tmp/hello-rs hello.rs && /tmp/hello-rs"),
    "java": ("Hello.java", 'public class Hello { public static void main(String[] a) { '
             'System.out.println("hello from java"); } }',
             "javac -d /tmp/java Hello.java && java -cp /tmp/java Hello"),
}


@pytest.fixture(scope="module")
def toolchain_daemon(sandloomd_binary):
    from conftest import Daemon
    d = Daemon(sandloomd_binary, {"SANDBOX_TOOLCHAINS": TOOLCHAINS}).spawn()
    try:
        d.wait_healthy(timeout=60)
        yield d
    finally:
        d.cleanup()


@pytest.fixture(scope="module")
def sb(toolchain_daemon):
    s = Sandbox(toolchain_daemon.client(), "tc-" + uuid.uuid4().hex[:8], "scope")
    assert s.resolve().status == 200 and s.connect().status == 200
    return s


def test_every_toolchain_passes_its_launch_check(toolchain_daemon):
    tc = toolchain_daemon.client().get("/healthz").body["worker"]["capabilities"]["toolchains"]
    for name in TOOLCHAINS.split(",") + ["typescript"]:
        check = tc["checks"][name]
        assert check["status"] == "available", (name, check)
    assert set(tc["available"]) >= set(TOOLCHAINS.split(",")), tc["available"]


@pytest.mark.parametrize("shell", ["sh -c", "sh -lc"])
@pytest.mark.parametrize("lang", sorted(PROGRAMS))
def test_a_program_compiles_and_runs(sb, lang, shell):
    name, source, build_and_run = PROGRAMS[lang]
    assert sb.write(f"/workspace/{lang}/{name}", source).status == 200
    r = sb.exec(shell.split() + [f"cd /workspace/{lang} && {build_and_run}"],
                timeout_seconds=120, timeout=150)
    assert r.status == 200, r
    b = r.body
    assert b["status"] == "SUCCEEDED", (lang, shell, b)
    assert b["stdout"].strip().endswith(f"hello from {lang}"), (lang, shell, b)


def test_go_finds_its_root_where_debian_installed_it(sb):
    r = sb.exec(["sh", "-c", "go env GOROOT; test -x \"$(go env GOROOT)/bin/go\" && echo ok"])
    assert r.body["status"] == "SUCCEEDED" and r.body["stdout"].endswith("ok\n"), r.body
    assert "cannot find GOROOT" not in r.body["stderr"], r.body


def test_pip_installs_into_the_managed_environment(sb):
    """No PEP 668 refusal: pip runs in /envs/python-venv, and python3 (the
    sandbox's, first on PATH) imports what it installed."""
    pkg = "/workspace/hellopkg"
    assert sb.write(f"{pkg}/hellopkg.py", "def hi():\n    return 42\n").status == 200
    assert sb.write(f"{pkg}/setup.py", "from setuptools import setup\n"
                    "setup(name='hellopkg', version='1.0', py_modules=['hellopkg'])\n").status == 200
    r = sb.exec(["sh", "-c", f"pip install --no-index --no-build-isolation {pkg} 2>&1 | tail -1"],
                timeout_seconds=120, timeout=150)
    assert r.body["status"] == "SUCCEEDED", r.body
    assert "Successfully installed hellopkg-1.0" in r.body["stdout"], r.body
    assert "externally-managed" not in r.body["stdout"], r.body
    r = sb.exec(["python3", "-c", "import hellopkg; print(hellopkg.hi(), hellopkg.__file__)"])
    assert r.body["stdout"].startswith("42 /envs/python-venv/lib/python3"), r.body
    # The environment is the sandbox's: it persists and is its uid's.
    r = sb.exec(["sh", "-c", "cat /envs/python-venv/pyvenv.cfg; stat -c %u /envs/python-venv"])
    assert "include-system-site-packages = true" in r.body["stdout"], r.body
    assert r.body["stdout"].strip().endswith("0"), r.body  # uid 0 inside = the sandbox's own


def test_npm_does_not_warn_about_pnpm_settings(sb):
    r = sb.exec(["sh", "-c", "npm config get cache; npm --version"])
    assert r.body["status"] == "SUCCEEDED", r.body
    assert "Unknown env config" not in r.body["stderr"], r.body
    assert r.body["stderr"] == "", r.body
    assert r.body["stdout"].startswith("/cache/npm\n"), r.body
