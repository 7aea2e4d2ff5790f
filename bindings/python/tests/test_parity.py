"""deathtensors 0.3.0's API here: a program written for 0.3.0
(`legacy_program.py`, every public name) runs unchanged under this package
and prints what it prints under 0.3.0 (its wheel, in a venv the tests
create), and the files each run writes open in the other."""

import glob
import hashlib
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import deathtensors as dt
from test_interop import READ_SCRIPT, legacy  # noqa: F401 - the fixture

PROGRAM = pathlib.Path(__file__).with_name("legacy_program.py")

# Where ours and 0.3.0 are meant to differ (docs/MIGRATING.md): ours knows
# more dtypes.
SUPERSETS = ("supported_dtypes", "torch_map", "dt_map")


def run_ours(out):
    r = subprocess.run([sys.executable, str(PROGRAM), str(out)], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def runs(tmp_path_factory, legacy):  # noqa: F811 - the fixture
    os.environ["DT_TEST_VAR"] = "var"
    # Where this interpreter finds torch (its site-packages, or a directory
    # a .pth file adds), for 0.3.0's venv to append to its path.
    import torch

    os.environ["DT_EXTRA_SITE"] = str(pathlib.Path(torch.__file__).resolve().parents[1])
    theirs_dir, ours_dir = tmp_path_factory.mktemp("v030"), tmp_path_factory.mktemp("ours")
    try:
        # The legacy fixture parses stdout as JSON: the program's CLI call
        # prints names first, so run it raw here.
        from conftest import peer_runner
        from test_interop import LEGACY_VENV

        raw = peer_runner(LEGACY_VENV, "deathtensors==0.3.0", "deathtensors 0.3.0")
        theirs = json.loads(raw(PROGRAM.read_text(), theirs_dir).strip().splitlines()[-1])
    finally:
        del os.environ["DT_EXTRA_SITE"]
    ours = run_ours(ours_dir)
    return theirs, ours, theirs_dir, ours_dir


def test_the_program_runs_unchanged_and_prints_what_it_prints_under_030(runs):
    theirs, ours, _, _ = runs
    assert set(ours) == set(theirs)
    for key in SUPERSETS:
        assert set(theirs[key]) <= set(ours[key]), key
        if isinstance(theirs[key], dict):
            assert {k: ours[key][k] for k in theirs[key]} == theirs[key], key
    differing = {k: (theirs[k], ours[k]) for k in theirs if k not in SUPERSETS and theirs[k] != ours[k]}
    assert not differing


def test_the_results_are_right_not_only_equal(runs):
    _, ours, _, _ = runs
    assert ours["keys"] == ["w", "b", "i", "t"]
    assert ours["slice_numpy"] == np.arange(24, dtype=np.float32).reshape(6, 4)[2:5].tolist()
    assert ours["stats"]["min"] == -1.5 and ours["stats"]["nnz"] == 2 and ours["stats"]["count"] == 3
    assert ours["append"][0] == ["a", "extra", "extra2"] and ours["append"][1]["v"] == "2"
    assert ours["diff"]["shape_changed"] == {"b": [[3], [3, 1]]}
    assert ours["diff"]["dtype_changed"] == {"i": ["I64", "I32"]}
    assert ours["diff"]["value_changed"] == ["w"] and ours["diff"]["added"] == ["new"]
    assert ours["shards"] == [f"sharded-0000{k}-of-0003.deathtensors" for k in (1, 2, 3)]
    assert ours["sparse"][1] == [[0.0, 0.0, 1.0], [2.0, 0.0, 0.0], [0.0, 3.0, 0.0]]
    assert ours["schema"] == ["DeathTensorsError"] * 5
    assert ours["constants"]["expand_path"] == os.path.normpath(os.path.expanduser("~/models/x.deathtensors"))


def _tensors_read_here(path):
    with dt.open(path, verify=True) as f:
        return {k: hashlib.sha256(f.get_bytes(k)).hexdigest() for k in f.keys()}, f.metadata()


def test_files_030_wrote_open_here(runs):
    _, _, theirs_dir, _ = runs
    files = sorted(glob.glob(str(theirs_dir / "*.deathtensors")) + glob.glob(str(theirs_dir / "*.dt")))
    assert len(files) >= 10
    for path in files:
        digests, _ = _tensors_read_here(path)
        assert all(len(d) == 64 for d in digests.values())
    # The index 0.3.0 wrote opens as a checkpoint.
    with dt.open_sharded(theirs_dir / "sharded.deathtensors", verify=True) as r:
        assert len(r) == 5 and r.which_shard("layer.0.weight") == "sharded-00001-of-0003.deathtensors"


def test_files_we_wrote_open_in_030(runs, legacy):  # noqa: F811 - the fixture
    _, _, _, ours_dir = runs
    files = sorted(glob.glob(str(ours_dir / "*.deathtensors")) + glob.glob(str(ours_dir / "*.dt")))
    # Per-tensor compression is a feature 0.3.0 refuses (a new flag bit).
    readable = [f for f in files if os.path.basename(f) != "compressed.deathtensors"]
    seen = legacy(READ_SCRIPT, *readable)
    for path in readable:
        digests, metadata = _tensors_read_here(path)
        assert {k: v["sha256"] for k, v in seen[path]["tensors"].items()} == digests, path
        assert seen[path]["metadata"] == metadata, path


REFUSE_SCRIPT = r"""
import json, sys
import deathtensors as dt
try:
    dt.open(sys.argv[1])
    print(json.dumps(None))
except Exception as e:
    print(json.dumps(str(e)))
"""


def test_030_refuses_our_per_tensor_compression(runs, legacy):  # noqa: F811 - the fixture
    _, _, _, ours_dir = runs
    message = legacy(REFUSE_SCRIPT, ours_dir / "compressed.deathtensors")
    assert message is not None and "unknown flag bits 0x00000020" in message


SIGNATURES_SCRIPT = r"""
import inspect, json
import deathtensors as d

def params(f):
    try:
        return [(p.name, p.kind.name, None if p.default is p.empty else repr(p.default))
                for p in inspect.signature(f).parameters.values()]
    except (TypeError, ValueError):
        return None  # a native callable without a signature

out = {"__all__": d.__all__, "names": [n for n in dir(d) if not n.startswith("_")]}
for n in d.__all__:
    o = getattr(d, n, None)
    if callable(o) and not isinstance(o, type):
        out[n] = params(o)
for cname in ("DtFile", "ShardedReader", "Schema"):
    c = getattr(d, cname)
    for m in dir(c):
        if (not m.startswith("_") or m == "__init__") and callable(getattr(c, m)):
            out[f"{cname}.{m}"] = params(getattr(c, m))
print(json.dumps(out))
"""


def test_every_030_name_exists_with_its_positional_parameters(legacy):  # noqa: F811 - the fixture
    theirs = legacy(SIGNATURES_SCRIPT)
    r = subprocess.run([sys.executable, "-c", SIGNATURES_SCRIPT], capture_output=True, text=True, check=True)
    ours = json.loads(r.stdout)
    stdlib = {"Any", "Dict", "Iterable", "Iterator", "List", "Mapping", "Optional", "Tuple", "Union", "annotations",
              "argparse", "builtins", "datetime", "hashlib", "json", "os", "shutil", "sys"}
    assert set(theirs["names"]) - stdlib <= set(ours["names"])
    assert set(theirs["__all__"]) <= set(ours["__all__"])
    checked = 0
    for name, params in theirs.items():
        if name in ("__all__", "names") or params is None:
            continue
        positional = [p for p in params if p[1] in ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")]
        mine = [p for p in ours[name] if p[1] in ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")]
        # Same names, order and defaults; ours may add parameters after them.
        assert [(p[0], p[2]) for p in mine[: len(positional)]] == [(p[0], p[2]) for p in positional], name
        # save_sparse(path, tensors, **kwargs) passes them on (0.3.0's native
        # classes show object's *args, **kwargs: not an API).
        if "." not in name and any(p[1] == "VAR_KEYWORD" for p in params):
            assert any(p[1] == "VAR_KEYWORD" for p in ours[name]), name
        checked += 1
    assert checked > 40
