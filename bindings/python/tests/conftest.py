"""Shared fixtures: the repository's test data and its manifest, and moto's
S3 server."""

import hashlib
import json
import pathlib
import sys

import pytest

TESTDATA = pathlib.Path(__file__).resolve().parents[3] / "testdata"


@pytest.fixture(scope="session")
def manifest():
    return json.loads((TESTDATA / "valid" / "manifest.json").read_text())


@pytest.fixture(scope="module")
def moto():
    """moto's S3 server on loopback, for the module's tests: its port."""
    import socket

    try:
        from moto.server import ThreadedMotoServer
    except ImportError:
        pytest.skip("moto[server] is not installed (cargo xtask setup installs it into .venv)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield port
    finally:
        server.stop()


def sha256(data) -> str:
    return hashlib.sha256(bytes(data)).hexdigest()


def mappings_of(path) -> int:
    """How many mappings of `path` this process has (Linux's /proc/self/maps)."""
    with open("/proc/self/maps") as f:
        return sum(line.rstrip().endswith(str(path)) for line in f)



def peer_runner(venv, requirement, what):
    """A function that runs a Python script under a peer's own package (in
    a venv of its own at `venv`, made on first use: peers share our import
    names), returning its stdout; a failing script fails the test with its
    stderr."""
    import subprocess
    import sys

    python = pathlib.Path(venv) / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", requirement, "numpy"], check=True)

    def run(script, *args):
        r = subprocess.run([str(python), "-c", script, *map(str, args)], capture_output=True, text=True)
        if r.returncode != 0:
            raise AssertionError(f"{what} failed:\n{r.stderr}")
        return r.stdout

    return run


@pytest.fixture(scope="module")
def ref():
    """testdata/crypto/reference.py: the independent implementation of
    FORMAT.md sections 10 and 11 (needs cryptography and argon2-cffi)."""
    pytest.importorskip("cryptography")
    pytest.importorskip("argon2")
    crypto = TESTDATA / "crypto"
    sys.path.insert(0, str(crypto))
    try:
        import reference
    finally:
        sys.path.remove(str(crypto))
    return reference
