"""How large tensors load: mapped copy-on-write from a local disk, read
into memory the tensor owns on a network or user-space file system, and
either way when ``map_tensors=`` says so."""

import os
import subprocess
import sys

import numpy as np
import pytest

import deathtensors as dt


@pytest.fixture
def big(tmp_path):
    path = tmp_path / "big.dt"
    dt.save(path, {"w": np.arange(1 << 20, dtype=np.float32), "b": np.ones(3, dtype=np.float32)})
    return path


def test_a_local_file_maps_by_default_and_either_way_on_request(big):
    with dt.open(big) as f:
        assert f._reader.maps_tensors()
    with dt.open(big, map_tensors=False) as f:
        assert not f._reader.maps_tensors()
        w = f.get_tensor("w", framework="numpy")
        assert np.array_equal(w, np.arange(1 << 20, dtype=np.float32))
    with dt.open(big, map_tensors=True) as f:
        assert f._reader.maps_tensors()
    with pytest.raises(TypeError):
        dt.open(big, map_tensors="yes")


def test_a_read_tensor_outlives_the_file_truncated_under_it(big):
    # Read into memory it owns (map_tensors=False): truncating the file
    # cannot take its pages away. Run in a child: a mapped tensor would
    # die of SIGBUS there, not here.
    code = f"""
import os, numpy as np, deathtensors as dt
t = dt.open({str(big)!r}, map_tensors=False).get_tensor("w", framework="numpy")
os.truncate({str(big)!r}, 4096)
assert float(t.sum()) == float(np.arange(1 << 20, dtype=np.float64).sum()), t.sum()
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stderr)


def test_options_that_forbid_a_mapping_win_over_map_tensors(tmp_path):
    # A compressed file has no bytes to map, whatever the option says.
    path = tmp_path / "c.dt"
    dt.save(path, {"w": np.zeros(1 << 20, dtype=np.float32)}, compress=True)
    with dt.open(path, map_tensors=True) as f:
        assert not f._reader.maps_tensors()
        assert not f.get_tensor("w", framework="numpy").any()


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm (tmpfs) here")
def test_tmpfs_is_a_local_file_system(tmp_path):
    path = f"/dev/shm/dt-map-{os.getpid()}.dt"
    try:
        dt.save(path, {"w": np.ones(4, dtype=np.float32)})
        with dt.open(path) as f:
            assert f._reader.maps_tensors()
    finally:
        os.unlink(path)
