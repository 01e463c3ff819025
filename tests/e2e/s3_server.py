"""A real S3 server for end-to-end tests: tests/s3server's s3rver behind a
SigV4-checking front, started through its wrapper (installed with npm on
first use). Import the `s3` fixture; its value is the endpoint URL. A host
that cannot run it fails the test with the reason."""
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WRAPPER = ROOT / "tests" / "s3server" / "run-with-s3rver.sh"


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    out = tmp_path_factory.mktemp("s3") / "endpoint"
    proc = subprocess.Popen(
        [str(WRAPPER), "sh", "-c", f'echo "$SANDLOOM_TEST_S3_ENDPOINT" > {out}; exec sleep 3600'],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 180
    while not (out.exists() and out.read_text().strip()) and time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the S3 test server did not start: {proc.stdout.read().decode()}")
        time.sleep(0.2)
    if not (out.exists() and out.read_text().strip()):
        os.killpg(proc.pid, signal.SIGTERM)
        pytest.fail("the S3 test server did not start within 180 s")
    try:
        yield out.read_text().strip()
    finally:
        # The whole group: the wrapper only runs its clean-up once the
        # command it waits for has ended.
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)


