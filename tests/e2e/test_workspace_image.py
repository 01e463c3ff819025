"""The workspace image (SANDBOX_WORKSPACE_IMAGE_BYTES, workspace/image.h):
a preallocated btrfs image that sandloomd makes at its first start and
mounts at the workspace root and the template root. Its lifetime across
clean stops, kill -9 and a bigger size, and the starts it refuses."""
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import unique_id
from fs_helpers import tmpfs
from sandloom_client import Sandbox

MiB = 1024 * 1024


@pytest.fixture
def state():
    d = Path(tempfile.mkdtemp(prefix="sandloom-image-"))
    os.chmod(d, 0o711)
    try:
        yield d
    finally:
        # Whatever a failed case left mounted goes before the files.
        for root in ("sandboxes", "templates"):
            subprocess.run(["umount", "-l", str(d / root)], check=False,
                           stderr=subprocess.DEVNULL)
        shutil.rmtree(d, ignore_errors=True)


def image_env(size):
    return {"SANDBOX_WORKSPACE_IMAGE_BYTES": str(size), "SANDBOX_MIN_FREE_BYTES": str(MiB)}


def mount_source(path):
    """The source of the mount at path, or None."""
    for line in open("/proc/self/mountinfo"):
        f = line.split()
        if f[4] == str(path):
            src = f[f.index("-") + 2]
    return locals().get("src")


def loops_of(image):
    out = subprocess.run(["losetup", "-j", str(image)], capture_output=True, text=True).stdout
    return [l.split(":")[0] for l in out.splitlines()]


def fs_bytes(path):
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize


def new_sandbox(d):
    sb = Sandbox(d.client(), unique_id("img"), unique_id("scope"))
    assert sb.resolve().status == 200
    assert sb.connect().status == 200
    return sb


def test_made_once_reserved_and_kept_across_restarts(daemon_factory, state):
    image = state / "sandboxes.img"
    d = daemon_factory(image_env(512 * MiB), state_dir=state)
    assert "(created)" in d.stderr(), d.stderr()
    # Reserved, not sparse: a full host disk cannot fail btrfs's writes.
    st = image.stat()
    assert st.st_size == 512 * MiB and st.st_blocks * 512 >= 512 * MiB, st
    assert st.st_mode & 0o777 == 0o600, oct(st.st_mode)
    for root in ("sandboxes", "templates"):
        src = mount_source(state / root)
        assert src and src.startswith("/dev/loop"), (root, src)
    sb = new_sandbox(d)
    assert sb.write("/workspace/kept.txt", "persisted").status == 200
    assert d.stop() == 0
    # A clean stop unmounts both roots, and the loop device detaches itself.
    assert mount_source(state / "sandboxes") is None and mount_source(state / "templates") is None
    assert loops_of(image) == [], loops_of(image)

    d = daemon_factory(image_env(512 * MiB), state_dir=state, port=d.port)
    assert "(created)" not in d.stderr(), d.stderr()
    sb = Sandbox(d.client(), sb.id, sb.scope)
    assert sb.resolve().status == 200 and sb.connect().status == 200
    assert sb.read_bytes("/workspace/kept.txt") == b"persisted"


def test_after_kill_9_the_next_start_adopts_the_mounts(daemon_factory, state):
    image = state / "sandboxes.img"
    d = daemon_factory(image_env(512 * MiB), state_dir=state)
    sb = new_sandbox(d)
    assert sb.write("/workspace/before.txt", "x").status == 200
    os.killpg(d.proc.pid, signal.SIGKILL)
    d.proc.wait()
    # Still mounted: nothing ran to unmount them.
    assert mount_source(state / "sandboxes").startswith("/dev/loop")
    assert len(loops_of(image)) == 1

    d = daemon_factory(image_env(512 * MiB), state_dir=state, port=d.port)
    assert "left by a previous run" in d.stderr(), d.stderr()
    assert len(loops_of(image)) == 1, loops_of(image)  # the same device, not a second one
    sb = Sandbox(d.client(), sb.id, sb.scope)
    assert sb.resolve().status == 200 and sb.connect().status == 200
    assert sb.read_bytes("/workspace/before.txt") == b"x"
    assert d.stop() == 0
    assert loops_of(image) == [] and mount_source(state / "sandboxes") is None


def test_a_bigger_size_grows_the_image_and_its_filesystem(daemon_factory, state):
    d = daemon_factory(image_env(300 * MiB), state_dir=state)
    small = fs_bytes(state / "sandboxes")
    assert d.stop() == 0
    d = daemon_factory(image_env(600 * MiB), state_dir=state, port=d.port)
    assert (state / "sandboxes.img").stat().st_size == 600 * MiB
    big = fs_bytes(state / "sandboxes")
    assert big > small + 250 * MiB, (small, big)
    assert d.stop() == 0
    # Smaller again: kept at its size, with a warning.
    d = daemon_factory(image_env(300 * MiB), state_dir=state, port=d.port)
    assert "kept at its size" in d.stderr(), d.stderr()
    assert fs_bytes(state / "sandboxes") == big


def refusal(daemon_factory, env, state):
    rc, err = daemon_factory(env, state_dir=state, expect_exit=True)
    assert rc not in (None, 0), err
    return err


def test_starts_it_refuses(daemon_factory, state):
    # Too small for btrfs and a few sandboxes.
    err = refusal(daemon_factory, image_env(64 * MiB), state)
    assert "SANDBOX_WORKSPACE_IMAGE_BYTES: must be 0 (no image) or at least" in err, err
    # An image is one host's; a shared root is every worker's.
    shared = state / "shared"
    shared.mkdir()
    err = refusal(daemon_factory, {**image_env(512 * MiB), "SANDBOX_SHARED_ROOT": str(shared)},
                  state)
    assert "cannot be used with SANDBOX_SHARED_ROOT" in err, err
    # Files already at the workspace root would be hidden under the mount.
    (state / "sandboxes").mkdir()
    (state / "sandboxes" / "old-sandbox").mkdir()
    err = refusal(daemon_factory, image_env(512 * MiB), state)
    assert "is not empty" in err and str(state / "sandboxes") in err, err
    assert not (state / "sandboxes.img").exists()
    shutil.rmtree(state / "sandboxes")
    # A root that is a mount of something else is not taken over.
    (state / "templates").mkdir(exist_ok=True)
    with tmpfs("16m") as other:
        subprocess.run(["mount", "--bind", str(other), str(state / "templates")], check=True)
        try:
            err = refusal(daemon_factory, image_env(512 * MiB), state)
        finally:
            subprocess.run(["umount", str(state / "templates")], check=True)
    assert "is already a mount of" in err and "not of the workspace image" in err, err


def test_no_room_to_reserve_is_refused_and_leaves_nothing(daemon_factory):
    with tmpfs("300m") as small:
        os.chmod(small, 0o711)
        env = {**image_env(1024 * MiB), "SANDBOX_LOCAL_ROOT": str(Path(small) / "sandboxes")}
        d_state = Path(small) / "state"
        d_state.mkdir()
        err = refusal(daemon_factory, env, d_state)
        assert "cannot reserve 1073741824 bytes for the workspace image" in err, err
        assert sorted(p.name for p in Path(small).iterdir()) == ["sandboxes", "state",
                                                                 "templates"], \
            list(Path(small).iterdir())


def test_the_image_top_left_mounted_on_a_root_is_replaced(daemon_factory, state):
    """A start killed while the image's top was mounted (or an operator's
    `mount -o loop`): the top is not taken for the sandboxes subvolume."""
    d = daemon_factory(image_env(512 * MiB), state_dir=state)
    sb = new_sandbox(d)
    assert sb.write("/workspace/kept.txt", "x").status == 200
    assert d.stop() == 0
    image = state / "sandboxes.img"
    subprocess.run(["mount", "-o", "loop,nodiscard", str(image), str(state / "sandboxes")],
                   check=True)
    d = daemon_factory(image_env(512 * MiB), state_dir=state, port=d.port)
    roots = {}
    for line in open("/proc/self/mountinfo"):
        f = line.split()
        if f[4] in (str(state / "sandboxes"), str(state / "templates")):
            roots[f[4]] = f[3]  # the topmost wins
    assert roots == {str(state / "sandboxes"): "/sandboxes",
                     str(state / "templates"): "/templates"}, roots
    sb = Sandbox(d.client(), sb.id, sb.scope)
    assert sb.resolve().status == 200 and sb.connect().status == 200
    assert sb.read_bytes("/workspace/kept.txt") == b"x"
    assert d.stop() == 0
    assert loops_of(image) == [], loops_of(image)
    assert not list(state.glob("sandboxes.img.top-*")), "the top's directory was left"
