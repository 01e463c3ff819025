"""The README runs as written: every shell block after "A first session",
pasted in order into one fresh bash, against a daemon started the way
`make run` starts it (no token set, so the one it saved in
state/internal-token). Only the port is changed, to the test daemon's.
Each curl fails the run on an HTTP error (--fail-with-body), so a block
that drifts from the API fails here."""
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from conftest import REPO, find_binary


def readme_blocks():
    text = (REPO / "README.md").read_text()
    after = text[text.index("## A first session"):]
    return re.findall(r"^```sh\n(.*?)^```", after, flags=re.S | re.M)


def test_the_readme_blocks_run_in_order(daemon_factory):
    blocks = readme_blocks()
    assert len(blocks) >= 2, "the README lost its session blocks"
    d = daemon_factory(token=None)
    shell = Path(tempfile.mkdtemp(prefix="sandloom-readme-"))
    (shell / "state").symlink_to(d.state)
    script = "\n".join(
        ["set -euo pipefail",
         # Every call must succeed; the answers go on separate lines.
         'curl() { command curl --fail-with-body "$@"; echo; }']
        + [b.replace("127.0.0.1:8080", f"127.0.0.1:{d.port}") for b in blocks])
    r = subprocess.run(["bash", "-c", script], cwd=shell, capture_output=True, text=True,
                       timeout=180, env={"PATH": f"{find_binary().parent}:"
                                                 + os.environ.get("PATH", "/usr/bin:/bin"),
                                         "HOME": str(shell)})
    out = r.stdout
    print(out)
    assert r.returncode == 0, f"a README block failed ({r.returncode}):\n{out}\n{r.stderr}"
    # What a reader is told to expect.
    assert "hello from" in out and "Python 3" in out, out
    assert '"content_base64":"aGk="' in out, out   # read back, and again after resume
    assert out.count('"content_base64":"aGk="') == 2, out
    assert '"stdout":"v1\\n"' in out, out          # the template seen from the other sandbox
    assert '{"cancelled":true}' in out, out
    # The CLI block: the command's output and exit code, the file read back.
    assert "hi\nexit 3\n" in out and "a,b\n1,2\n" in out, out
    assert '"sandbox_id":"proj"' in out, out
    assert '"status":"RELEASED"' in out, out
    # The background server answered the next command, and Go compiled
    # where the host has Go (make test installs Debian's golang-go).
    assert '"exec_id":"serve","status":"SUCCEEDED"' in out, out
    assert '"exec_id":"fetch","status":"SUCCEEDED","exit_code":0,"stdout":"hello\\n\\n"' in out, out
    if shutil.which("go"):
        assert '"stdout":"hello from go\\n"' in out, out
    else:
        assert '"exec_id":"go-run","status":"FAILED"' in out, out
    assert '"exec_id":"pip","status":"SUCCEEDED","exit_code":0,"stdout":"pip ' in out, out
