"""URLs wherever a path is accepted (``dt.open``, ``open_sharded``, the
safetensors drop-in), against nginx and moto's S3 server on loopback, which
these tests start and stop; nginx's access log counts the requests."""

import os
import pathlib
import shutil
import socket
import subprocess
import time

import numpy as np
import pytest

import deathtensors as dt
from deathtensors.safetensors import safe_open
from deathtensors.safetensors.numpy import load_file, save_file


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(port: int, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"{what} exited at start")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not listen on port {port} within 20 s")
            time.sleep(0.05)


class Nginx:
    def __init__(self, root: pathlib.Path, port: int, log: pathlib.Path):
        self.root, self.port, self.log = root, port, log

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def requests(self) -> list:
        """The access log's lines so far: one per request."""
        return self.log.read_text().splitlines() if self.log.exists() else []


@pytest.fixture(scope="module")
def nginx(tmp_path_factory):
    binary = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    if binary is None:
        pytest.skip("nginx is not installed (cargo xtask setup installs it with apt-get)")
    d = tmp_path_factory.mktemp("nginx")
    root = d / "www"
    root.mkdir()
    (d / "tmp").mkdir()
    port = _free_port()
    log = d / "access.log"
    conf = d / "nginx.conf"
    conf.write_text(
        f"daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n"
        "events { worker_connections 256; }\n"
        f"http {{ access_log {log}; client_body_temp_path {d}/tmp; proxy_temp_path {d}/tmp; "
        f"fastcgi_temp_path {d}/tmp; uwsgi_temp_path {d}/tmp; scgi_temp_path {d}/tmp;\n"
        f"server {{ listen 127.0.0.1:{port}; root {root}; location / {{ }} }} }}\n"
    )
    proc = subprocess.Popen([binary, "-p", str(d), "-c", str(conf)], stdin=subprocess.DEVNULL)
    try:
        _wait(port, proc, "nginx")
        yield Nginx(root, port, log)
    finally:
        proc.kill()
        proc.wait()


def _tensors(n=6, size=50_000):
    rng = np.random.default_rng(7)
    return {f"layer.{i}": rng.standard_normal(size // 4).astype(np.float32) for i in range(n)}


def _requests_for(nginx, name):
    return [line for line in nginx.requests() if f"/{name} " in line]


def test_open_url_reads_one_tensor_with_two_requests(nginx):
    tensors = _tensors()
    dt.save(nginx.root / "a.dt", tensors, checksum=True)
    with dt.open(nginx.url("a.dt")) as f:
        assert sorted(f.keys()) == sorted(tensors)
        assert len(_requests_for(nginx, "a.dt")) == 1
        np.testing.assert_array_equal(f.get_tensor("layer.3", framework="numpy"), tensors["layer.3"])
        assert len(_requests_for(nginx, "a.dt")) == 2
        got = f.get_tensors(framework="numpy")
    assert all(np.array_equal(got[k], v) for k, v in tensors.items())


def test_a_tensor_with_a_bad_digest_raises(nginx):
    tensors = _tensors(3, 10_000)
    path = nginx.root / "bad.dt"
    dt.save(path, tensors, checksum=True)
    data = bytearray(path.read_bytes())
    at = data.find(tensors["layer.1"].tobytes())
    assert at > 0
    data[at + 5] ^= 1
    path.write_bytes(bytes(data))
    with dt.open(nginx.url("bad.dt")) as f:
        np.testing.assert_array_equal(f.get_tensor("layer.0", framework="numpy"), tensors["layer.0"])
        with pytest.raises(dt.IntegrityError, match="layer.1"):
            f.get_tensor("layer.1", framework="numpy")


def test_missing_url_is_file_not_found(nginx):
    with pytest.raises(FileNotFoundError):
        dt.open(nginx.url("missing.dt"))


def test_safetensors_drop_in_accepts_urls(nginx):
    tensors = _tensors(4, 8_000)
    save_file(tensors, str(nginx.root / "m.safetensors"))
    with safe_open(nginx.url("m.safetensors"), framework="np") as f:
        np.testing.assert_array_equal(f.get_tensor("layer.2"), tensors["layer.2"])
    loaded = load_file(nginx.url("m.safetensors"))
    assert all(np.array_equal(loaded[k], v) for k, v in tensors.items())


def test_open_sharded_url_touches_only_the_shard_asked_for(nginx):
    tensors = _tensors(8, 40_000)
    (nginx.root / "sh").mkdir()
    shards = dt.save_sharded(nginx.root / "sh" / "model", tensors, max_shard_bytes=100_000, checksum=True)
    assert len(shards) >= 3
    names = [pathlib.Path(s).name for s in shards]
    with dt.open_sharded(nginx.url("sh/model.deathtensors.index.json")) as f:
        np.testing.assert_array_equal(f.get_tensor("layer.7", framework="numpy"), tensors["layer.7"])
    touched = {n for n in names if _requests_for(nginx, f"sh/{n}")}
    assert touched == {names[-1]}


def test_s3_url_with_storage_options(moto, tmp_path):
    import boto3

    endpoint = f"http://127.0.0.1:{moto}"
    options = {"aws_endpoint": endpoint, "aws_access_key_id": "testing", "aws_secret_access_key": "testing",
               "aws_region": "us-east-1"}
    s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing", aws_secret_access_key="testing",
                      region_name="us-east-1")
    s3.create_bucket(Bucket="models")
    tensors = _tensors(5, 30_000)
    dt.save(tmp_path / "m.dt", tensors, checksum=True)
    s3.upload_file(str(tmp_path / "m.dt"), "models", "m.dt")
    with dt.open("s3://models/m.dt", storage_options=options) as f:
        np.testing.assert_array_equal(f.get_tensor("layer.4", framework="numpy"), tensors["layer.4"])
        f.verify()
    with pytest.raises(FileNotFoundError):
        dt.open("s3://models/none.dt", storage_options=options)


# --- dead servers: bounded failures, in words -------------------------------


class _Silent:
    """A loopback server that accepts connections and never answers."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]

    def close(self):
        self.sock.close()


def test_a_silent_server_fails_within_the_storage_options_bound():
    server = _Silent()
    try:
        url = f"http://127.0.0.1:{server.port}/model.dt"
        start = time.monotonic()
        with pytest.raises(OSError, match="timed out") as e:
            dt.open(url, storage_options={"timeout": "1s", "max_retries": 1, "connect_timeout": "1s"})
        took = time.monotonic() - start
        assert url in str(e.value)
        # One request and one retry of 1 s each, and backoff: well within 10 s.
        assert took < 10, f"took {took:.1f} s"
        # retry_timeout bounds the whole, however many retries are allowed.
        start = time.monotonic()
        with pytest.raises(OSError, match="timed out"):
            dt.open(url, storage_options={"timeout": "1s", "max_retries": 50, "retry_timeout": "3s"})
        assert time.monotonic() - start < 12
    finally:
        server.close()


def test_refused_connections_and_bad_options_say_why():
    port = _free_port()  # nothing listens there
    url = f"http://127.0.0.1:{port}/model.dt"
    start = time.monotonic()
    with pytest.raises(OSError, match="connection refused"):
        dt.open(url, storage_options={"max_retries": 0})
    assert time.monotonic() - start < 10
    with pytest.raises(Exception, match=r"retry_timeout.*not a duration"):
        dt.open(url, storage_options={"retry_timeout": "5x"})
    with pytest.raises(Exception, match="allow_http is false"):
        dt.open(url, storage_options={"allow_http": False})
