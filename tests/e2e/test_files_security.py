"""File API path rules and symlink safety: API.md §5.1–§5.4.

Symlinks that must never be followed point at a canary directory created
on the host for the test (never at real system files for anything that
writes), so a broken daemon cannot damage the machine running the tests."""

import hashlib
import os
import shutil
import tempfile
import uuid
from pathlib import Path

import pytest

from sandloom_client import assert_bad_arg

DOTDOT = "file path may not contain .. or NUL"
SYMLINK_MSGS = ("file path may not traverse symlinks",
                "path is not a directory or traverses a symlink")
NOT_DIR = "path is not a directory or traverses a symlink"


def sha(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture
def canary():
    d = Path(tempfile.mkdtemp(prefix="sandloom-canary-"))
    os.chmod(d, 0o755)
    f = d / "keep.txt"
    f.write_bytes(b"canary content\n")
    os.chmod(f, 0o644)
    st = f.stat()
    yield d, f, (st.st_mode, st.st_mtime_ns, st.st_uid)
    shutil.rmtree(d, ignore_errors=True)


def assert_canary_intact(canary):
    d, f, (mode, mtime_ns, uid) = canary
    assert sorted(os.listdir(d)) == ["keep.txt"], f"canary dir modified: {os.listdir(d)}"
    assert f.read_bytes() == b"canary content\n", "canary file content changed"
    st = f.stat()
    assert (st.st_mode, st.st_mtime_ns, st.st_uid) == (mode, mtime_ns, uid), "canary file touched"


def test_dotdot_and_nul_refused_everywhere(ready_sandbox):
    sb = ready_sandbox
    assert sb.write("/workspace/ok.txt", b"1").status == 200
    bad_paths = ["/workspace/../etc/passwd", "../x", "a/../b", "/workspace/..", "..",
                 "/workspace/a/..", "/workspace/a/../../../etc"]
    for p in bad_paths:
        assert_bad_arg(sb.read(p), DOTDOT)
        assert_bad_arg(sb.write(p, b"x"), DOTDOT)
        assert_bad_arg(sb.list(p), DOTDOT)
        assert_bad_arg(sb.mkdir(p, parents=True), DOTDOT)
        assert_bad_arg(sb.rm(p, recursive=True), DOTDOT)
        assert_bad_arg(sb.move("/workspace/ok.txt", p), DOTDOT)
        assert_bad_arg(sb.move(p, "/workspace/ok2.txt"), DOTDOT)
    # NUL, in a JSON body and in a query string (must not be truncated).
    assert_bad_arg(sb.write("/workspace/ok.txt\u0000.evil", b"x"), DOTDOT)
    assert_bad_arg(sb.read("/workspace/ok.txt\u0000.evil"), DOTDOT)
    assert_bad_arg(sb.list("/workspace\u0000/x"), DOTDOT)
    # "..." and "..x" are ordinary names, not "..".
    assert sb.write("/workspace/...", b"dots").status == 200
    assert sb.read_bytes("/workspace/...") == b"dots"
    assert sb.write("/workspace/..x", b"dx").status == 200


def test_symlinks_are_never_followed(daemon, ready_sandbox, canary):
    sb = ready_sandbox
    cdir, cfile, _ = canary
    passwd_hash = sha("/etc/passwd")
    assert sb.mkdir("/workspace/real").status == 200
    assert sb.write("/workspace/real/f.txt", b"inner").status == 200
    script = (f"ln -s /etc /workspace/etc-link && ln -s /etc/passwd /workspace/pw && "
              f"ln -s {cdir} /workspace/dir-link && ln -s {cfile} /workspace/file-link && "
              f"ln -s /workspace/real /workspace/inner-link")
    r = sb.exec(["sh", "-c", script])
    assert r.status == 200 and r.body["status"] == "SUCCEEDED", r

    # The listing shows links as links.
    r = sb.list("/workspace")
    assert r.status == 200, r
    types = {e["name"]: e["type"] for e in r.body["entries"]}
    for name in ("etc-link", "pw", "dir-link", "file-link", "inner-link"):
        assert types.get(name) == "symlink", f"{name} listed as {types.get(name)!r}"

    # Reads.
    r = sb.read("/workspace/etc-link/passwd")
    assert_bad_arg(r, one_of=SYMLINK_MSGS)
    assert b"root:" not in r.raw
    r = sb.read("/workspace/pw")
    assert_bad_arg(r, "file path may not traverse symlinks")
    assert b"root:" not in r.raw
    assert_bad_arg(sb.read("/workspace/dir-link/keep.txt"), one_of=SYMLINK_MSGS)
    assert_bad_arg(sb.read("/workspace/file-link"), "file path may not traverse symlinks")
    # Even a link pointing inside the workspace is not traversed.
    assert_bad_arg(sb.read("/workspace/inner-link/f.txt"), one_of=SYMLINK_MSGS)

    # Listing through links.
    assert_bad_arg(sb.list("/workspace/dir-link"), NOT_DIR)
    assert_bad_arg(sb.list("/workspace/etc-link"), NOT_DIR)

    # Writes through links.
    assert_bad_arg(sb.write("/workspace/file-link", b"pwned"),
                   one_of=SYMLINK_MSGS + ("path is not a regular file",))
    assert_bad_arg(sb.write("/workspace/dir-link/new.txt", b"pwned"), one_of=SYMLINK_MSGS)
    assert_bad_arg(sb.write("/workspace/dir-link/keep.txt", b"pwned"), one_of=SYMLINK_MSGS)
    r = sb.mkdir("/workspace/dir-link/sub", parents=True)
    assert r.status == 400, r
    r = sb.mkdir("/workspace/dir-link/sub2")
    assert r.status == 400, r

    # Moves and deletes through links.
    assert sb.write("/workspace/stuff.txt", b"stuff").status == 200
    assert sb.move("/workspace/dir-link/keep.txt", "/workspace/stolen.txt").status == 400
    assert sb.move("/workspace/stuff.txt", "/workspace/dir-link/stuff.txt").status == 400
    assert sb.rm("/workspace/dir-link/keep.txt").status == 400
    assert_canary_intact(canary)

    # Deleting the link removes the link only, even recursively.
    r = sb.rm("/workspace/dir-link", recursive=True)
    assert r.status == 200, r
    r = sb.rm("/workspace/etc-link", recursive=True)
    assert r.status == 200, r
    names = [e["name"] for e in sb.list("/workspace").body["entries"]]
    assert "dir-link" not in names and "etc-link" not in names, names
    assert_canary_intact(canary)
    assert os.path.isfile("/etc/passwd") and sha("/etc/passwd") == passwd_hash
    assert os.path.isdir("/etc")

    # Writing below a link that points inside the workspace is refused too.
    assert_bad_arg(sb.write("/workspace/inner-link/g.txt", b"x"), one_of=SYMLINK_MSGS)

    # overwrite=true onto a link to a directory replaces the link, never the target tree.
    r = sb.exec(["ln", "-s", str(cdir), "/workspace/dir-link2"])
    assert r.status == 200 and r.body["status"] == "SUCCEEDED", r
    r = sb.move("/workspace/stuff.txt", "/workspace/dir-link2", overwrite=True)
    assert r.status == 200, r
    assert_canary_intact(canary)
    assert sb.read_bytes("/workspace/dir-link2") == b"stuff"

    # Recursive delete of a tree holding a link to the outside removes the link only.
    assert sb.mkdir("/workspace/tree/sub", parents=True).status == 200
    r = sb.exec(["ln", "-s", str(cdir), "/workspace/tree/sub/link"])
    assert r.status == 200 and r.body["status"] == "SUCCEEDED", r
    r = sb.rm("/workspace/tree", recursive=True)
    assert r.status == 200, r
    assert_canary_intact(canary)

    # A link can be moved as a link.
    r = sb.move("/workspace/file-link", "/workspace/file-link2")
    assert r.status == 200, r
    host_ws = daemon.sandbox_root / sb.id / "workspace"
    assert os.readlink(host_ws / "file-link2") == str(cfile)
    assert_canary_intact(canary)


def test_absolute_paths_live_inside_the_workspace(daemon, ready_sandbox):
    sb = ready_sandbox
    host_ws = daemon.sandbox_root / sb.id / "workspace"
    assert_bad_arg(sb.read("/etc/passwd"), "path does not exist")

    name = f"sandloom-e2e-{uuid.uuid4().hex}.txt"
    leaked = Path("/etc") / name
    try:
        r = sb.write(f"/etc/{name}", b"inside")
        assert r.status == 200, r
        assert not leaked.exists(), "a file API write escaped to the host's /etc"
    finally:
        if leaked.exists():
            leaked.unlink()
    assert (host_ws / "etc" / name).read_bytes() == b"inside"
    assert sb.read_bytes(f"/workspace/etc/{name}") == b"inside"
    assert sb.read_bytes(f"etc/{name}") == b"inside"
    assert sb.read_bytes(f"/workspace/./etc//{name}") == b"inside"

    # /workspacefoo is /workspace/workspacefoo.
    assert sb.write("/workspacefoo", b"foo").status == 200
    assert (host_ws / "workspacefoo").read_bytes() == b"foo"
    # Trailing slash / empty means the root.
    r = sb.list("/workspace/")
    assert r.status == 200 and {"etc", "workspacefoo"} <= {e["name"] for e in r.body["entries"]}
    r = sb.list("/")
    assert r.status == 200 and {"etc", "workspacefoo"} <= {e["name"] for e in r.body["entries"]}


def test_workspace_root_and_type_refusals(ready_sandbox):
    sb = ready_sandbox
    for root in ("/workspace", "/", "/workspace/", "/workspace/."):
        assert_bad_arg(sb.rm(root, recursive=True), "cannot delete the workspace root")
    assert_bad_arg(sb.write("/workspace", b"x"), "cannot write the workspace root")
    assert_bad_arg(sb.mkdir("/workspace"), "cannot create the workspace root")
    assert_bad_arg(sb.move("/workspace", "/workspace/x"), "cannot move the workspace root")
    assert_bad_arg(sb.move("/workspace/x", "/workspace"), "cannot move the workspace root")
    assert_bad_arg(sb.read("/workspace"), "path is not a regular file")

    assert sb.write("/workspace/file.txt", b"f").status == 200
    assert sb.mkdir("/workspace/dir").status == 200
    assert_bad_arg(sb.list("/workspace/file.txt"), NOT_DIR)
    assert_bad_arg(sb.read("/workspace/dir"), "path is not a regular file")
    assert_bad_arg(sb.write("/workspace/dir", b"x"), "path is not a regular file")
    assert_bad_arg(sb.mkdir("/workspace/file.txt/sub", parents=True), NOT_DIR)
    assert_bad_arg(sb.rm("/workspace/missing"), "path does not exist")
    assert_bad_arg(sb.read("/workspace/missing"), "path does not exist")
    assert_bad_arg(sb.list("/workspace/missing"), one_of=("path does not exist", NOT_DIR))
    assert_bad_arg(sb.move("/workspace/missing", "/workspace/m2"), "source path does not exist")
    assert_bad_arg(sb.move("/workspace/nodir/a", "/workspace/m2"),
                   "source parent directory does not exist")
    assert_bad_arg(sb.move("/workspace/file.txt", "/workspace/nodir/a"),
                   "destination parent directory does not exist")
    assert sb.write("/workspace/other.txt", b"o").status == 200
    assert_bad_arg(sb.move("/workspace/file.txt", "/workspace/other.txt"),
                   "destination already exists")
    r = sb.move("/workspace/file.txt", "/workspace/other.txt", overwrite=True)
    assert r.status == 200, r
    assert sb.read_bytes("/workspace/other.txt") == b"f"
    assert sb.mkdir("/workspace/dir/inner").status == 200
    assert_bad_arg(sb.move("/workspace/dir", "/workspace/dir/inner", overwrite=True),
                   "cannot move overlapping directories")
    # Same source and destination: no-op 200 even when missing.
    r = sb.move("/workspace/ghost", "/workspace/./ghost")
    assert r.status == 200, r

    # Bad base64 is a 400 value error, not a 500.
    r = sb.c.put(sb.path + "/files", json={"generation": sb.generation, "path": "/workspace/b",
                                            "content_base64": "!!!not base64"})
    assert_bad_arg(r)
    r = sb.c.put(sb.path + "/files", json={"generation": sb.generation, "path": "/workspace/b",
                                            "content_base64": "YWJj\nZA=="})
    assert_bad_arg(r)


def test_list_paging(ready_sandbox):
    sb = ready_sandbox
    assert sb.mkdir("/workspace/page").status == 200
    for n in ("e", "b", "d", "a", "c"):
        assert sb.write(f"/workspace/page/{n}", n.encode()).status == 200
    r = sb.list("/workspace/page", limit=2, offset=1)
    assert r.status == 200, r
    assert [e["name"] for e in r.body["entries"]] == ["b", "c"], r
    assert r.body["total"] == 5 and r.body["has_more"] is True, r
    r = sb.list("/workspace/page", limit=2, offset=4)
    assert [e["name"] for e in r.body["entries"]] == ["e"], r
    assert r.body["has_more"] is False, r
    r = sb.list("/workspace/page", offset=10)
    assert r.body["entries"] == [] and r.body["total"] == 5, r


def test_names_needing_url_encoding_round_trip(ready_sandbox):
    """Query strings are decoded exactly once: '+' is a space only when the
    client encodes a space that way, %2B is a literal '+'."""
    sb = ready_sandbox
    names = ["a b.txt", "p+q.txt", "\u00fc-\u00f1-\u2713.txt", "100%.txt", "x&y=z#?.txt", "semi;colon"]
    for n in names:
        assert sb.write(f"/workspace/enc/{n}", n.encode()).status == 200, n
    for n in names:
        r = sb.read(f"/workspace/enc/{n}")
        assert r.status == 200, (n, r)
        assert r.body["path"] == f"/workspace/enc/{n}"
        assert sb.read_bytes(f"/workspace/enc/{n}") == n.encode(), n
    r = sb.list("/workspace/enc")
    assert sorted(e["name"] for e in r.body["entries"]) == sorted(names, key=lambda x: x.encode())
    assert [e["name"] for e in r.body["entries"]] == sorted(names, key=lambda x: x.encode()), \
        "entries are sorted by name in byte order"


def test_file_api_size_limit(daemon_factory):
    from sandloom_client import Sandbox
    limit = 1024 * 1024
    d = daemon_factory({"SANDBOX_MAX_FILE_API_BYTES": str(limit)})
    sb = Sandbox(d.client(), "size-" + uuid.uuid4().hex[:8], "scope")
    assert sb.resolve().status == 200 and sb.connect().status == 200
    assert sb.write("/workspace/exact", b"\x01" * limit).status == 200
    assert sb.read_bytes("/workspace/exact") == b"\x01" * limit
    too_big = "file exceeds the sandbox File API size limit"
    assert_bad_arg(sb.write("/workspace/over", b"\x01" * (limit + 1)), too_big)
    r = sb.list("/workspace")
    assert [e["name"] for e in r.body["entries"]] == ["exact"], "a refused write leaves nothing"
    r = sb.exec(["sh", "-c", f"head -c {limit + 1} /dev/zero > /workspace/made-inside"])
    assert r.status == 200 and r.body["status"] == "SUCCEEDED", r
    assert_bad_arg(sb.read("/workspace/made-inside"), too_big)


def test_list_is_capped_at_max_entries(ready_sandbox):
    sb = ready_sandbox
    r = sb.exec(["sh", "-c", "mkdir /workspace/many && cd /workspace/many && i=0; "
                             "while [ $i -lt 1005 ]; do : > f$i; i=$((i+1)); done"])
    assert r.status == 200 and r.body["status"] == "SUCCEEDED", r
    r = sb.list("/workspace/many", limit=5000)
    assert r.status == 200, r
    assert len(r.body["entries"]) == 1000, "SANDBOX_MAX_LIST_ENTRIES (1000) caps a page"
    assert r.body["total"] == 1005 and r.body["has_more"] is True, \
        {k: v for k, v in r.body.items() if k != "entries"}
    r = sb.list("/workspace/many", limit=5000, offset=1000)
    assert len(r.body["entries"]) == 5 and r.body["has_more"] is False
