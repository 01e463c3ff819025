"""A minimal PEP 517 build backend for the Sandloom SDK, standard library
only: a wheel is a zip of the package and its .dist-info, and nothing here
needs more. It builds wheels (and editable wheels via a .pth file) and
source archives; `pip install ./sdk/python` uses it with no network."""

import base64
import hashlib
import io
import os
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAME = "sandloom"
VERSION = "0.3.0"
TAG = "py3-none-any"
SUMMARY = "A typed client for Sandloom, the execution service for AI agents"


def _metadata():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\nSummary: {SUMMARY}\n"
            f"Requires-Python: >=3.9\nDescription-Content-Type: text/markdown\n\n{readme}")


def _wheel_text():
    return f"Wheel-Version: 1.0\nGenerator: sandloom-build\nRoot-Is-Purelib: true\nTag: {TAG}\n"


def _record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def _write_wheel(wheel_directory, files):
    dist = f"{NAME}-{VERSION}.dist-info"
    files = dict(files)
    files[f"{dist}/METADATA"] = _metadata().encode()
    files[f"{dist}/WHEEL"] = _wheel_text().encode()
    record = [_record_line(p, d) for p, d in files.items()] + [f"{dist}/RECORD,,"]
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    name = f"{NAME}-{VERSION}-{TAG}.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files.items():
            z.writestr(path, data)
    return name


def _package_files():
    out = {}
    for p in sorted((ROOT / NAME).rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            out[p.relative_to(ROOT).as_posix()] = p.read_bytes()
    return out


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, _package_files())


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, {f"{NAME}.pth": (str(ROOT) + "\n").encode()})


def build_sdist(sdist_directory, config_settings=None):
    base = f"{NAME}-{VERSION}"
    name = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as tar:
        for rel in ["pyproject.toml", "README.md", "_build/backend.py", *_package_files()]:
            tar.add(ROOT / rel, arcname=f"{base}/{rel}")
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        data = _metadata().encode()
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return name
