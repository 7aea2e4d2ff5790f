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


IN_PROCESS = r"""
import json, os, sys
import deathtensors as dt

path, key_file, policy, out = sys.argv[1:5]
for var in ("DEATHTENSORS_KEYS", "CRYPTOTENSOR_KEYS"):
    os.environ.pop(var, None)
codes = [
    dt.main(["decrypt", path, out + "1.dt", "--key", key_file, "--policy-input", policy]),
    # The same process, no key: the first run's key must not be kept.
    dt.main(["decrypt", path, out + "2.dt"]),
    # A key, but no policy input: the first run's input must not be kept.
    dt.main(["decrypt", path, out + "3.dt", "--key", key_file]),
    dt.main(["decrypt", path, out + "4.dt", "--key", key_file, "--policy-input", policy]),
]
print(json.dumps(codes))
"""


def test_each_in_process_run_sees_only_its_own_keys_and_policy_input(tmp_path):
    key = dt.generate_key("symmetric", kid="k")
    (tmp_path / "k.jwk").write_text(json.dumps(key))
    rego = 'package model\nimport rego.v1\ndefault allow := false\nallow if input.user == "alice"\n'
    path = tmp_path / "secret.dt"
    dt.save(path, {"w": np.arange(3, dtype=np.float32)}, encrypt=key, global_metadata={"__policy__": rego})
    r = subprocess.run(
        [sys.executable, "-c", IN_PROCESS, str(path), str(tmp_path / "k.jwk"), '{"user": "alice"}',
         str(tmp_path / "out")],
        capture_output=True, text=True,
    )
    assert r.returncode == 0, r.stderr
    # 2: no key (not an invalid file); 1: refused by the policy.
    assert json.loads(r.stdout.strip().splitlines()[-1]) == [0, 2, 1, 0], r.stderr
    assert (tmp_path / "out1.dt").exists() and (tmp_path / "out4.dt").exists()
    assert not (tmp_path / "out2.dt").exists() and not (tmp_path / "out3.dt").exists()
