"""docs/CONFIGURATION.md is what `make docs` generates from the
configuration table, and names every variable the service reads."""
import re
import subprocess
from pathlib import Path

from conftest import REPO


def test_configuration_md_is_generated_from_the_table(sandloomd_binary):
    tool = Path(sandloomd_binary).parent / "config-reference"
    r = subprocess.run([str(tool)], capture_output=True, text=True)
    assert r.returncode == 0, f"the table and its prose disagree: {r.stderr}"
    current = (REPO / "docs" / "CONFIGURATION.md").read_text()
    assert r.stdout == current, "docs/CONFIGURATION.md is stale: run `make docs`"


def test_every_variable_read_outside_the_table_is_documented():
    """getenv and its wrappers, anywhere in src/: each service setting they
    read (SANDBOX_*, BLOBSTORE_*, AWS_*; not HOME and the like) has a row
    (the table's own names are checked by the generator)."""
    doc = (REPO / "docs" / "CONFIGURATION.md").read_text()
    rows = set(re.findall(r"^\| `([A-Z0-9_]+)`", doc, flags=re.M))
    read = set()
    for path in (REPO / "src").rglob("*.c"):
        text = path.read_text()
        read |= set(re.findall(r'\b(?:getenv|env_nonempty|shared_file_path)\(\s*"((?:SANDBOX|BLOBSTORE|AWS)_[A-Z0-9_]+)"',
                               text))
    assert len(read) >= 10, read   # the scan itself still finds the S3 chain
    missing = sorted(read - rows)
    assert not missing, f"read by the service but not in docs/CONFIGURATION.md: {missing}"
