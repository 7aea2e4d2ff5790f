"""`python -m deathtensors` runs the command line (the same Rust code as the binary)."""

import json
import subprocess
import sys

import numpy as np
import pytest

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


def run_on_a_terminal(*args):
    """Runs the CLI with stderr on a pseudo-terminal (stdout a pipe), as a
    person at a terminal would see it; returns (exit code, what the terminal
    showed)."""
    import os
    import pty

    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "deathtensors", *map(str, args)],
                            stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    shown = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        shown += chunk
    proc.wait()
    os.close(master)
    return proc.returncode, shown.decode(errors="replace")


@pytest.mark.slow
def test_encrypt_and_sign_show_progress_on_a_terminal(tmp_path):
    # 320 MiB: past the size under which no bar is drawn (256 MiB).
    src = tmp_path / "big.dt"
    dt.save(src, {"w": np.ones(320 << 20, dtype=np.uint8)}, checksum=True, durable=False)
    assert run("keygen", "--type", "symmetric", "--kid", "k", "--out", tmp_path / "k.jwk").returncode == 0
    assert run("keygen", "--type", "ed25519", "--out", tmp_path / "s.jwk").returncode == 0
    code, shown = run_on_a_terminal("encrypt", src, tmp_path / "big.enc.dt", "--recipient", tmp_path / "k.jwk")
    assert code == 0, shown
    assert "encrypting [" in shown and "320.00 MiB" in shown, shown
    code, shown = run_on_a_terminal("sign", src, "--with", tmp_path / "s.jwk")
    assert code == 0, shown
    assert "signing" in shown and "MiB" in shown, shown
    # Not on a terminal: no bar at all.
    r = run("encrypt", src, tmp_path / "again.enc.dt", "--recipient", tmp_path / "k.jwk")
    assert r.returncode == 0 and "encrypting" not in r.stderr, r.stderr
