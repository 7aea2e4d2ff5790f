"""`python -m deathtensors` runs the command line (the same Rust code as the binary)."""

import json
import subprocess
import sys

import numpy as np

import deathtensors as dt
from conftest import TESTDATA


def run(*args):
    return subprocess.run([sys.executable, "-m", "deathtensors", *map(str, args)], capture_output=True, text=True)


def test_inspect_json_and_exit_codes(tmp_path):
    r = run("inspect", "--json", TESTDATA / "valid/safetensors-0.8.0/all_dtypes.safetensors")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["format"] == "safetensors" and len(doc["tensors"]) == 18
    bad = run("verify", TESTDATA / "valid/deathtensors-0.3.0/bad_checksum_bitflip.deathtensors")
    assert bad.returncode == 1 and "bad_checksum_bitflip" in bad.stderr
    assert run("no-such-command").returncode == 2


def test_convert_round_trip(tmp_path):
    src = tmp_path / "m.dt"
    dt.save(src, {"w": np.arange(10, dtype=np.float32)}, checksum=True)
    out = tmp_path / "m.safetensors"
    r = run("convert", src, out)
    assert r.returncode == 0, r.stderr
    from deathtensors import DtFile
    with DtFile(out) as f:
        assert f.format == "safetensors" and f.get_tensor("w", "numpy").tolist() == list(range(10))
