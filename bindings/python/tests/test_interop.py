"""Interop with the real deathtensors 0.3.0 (its PyPI wheel, in a separate
venv this test creates, since it has our import name): files we write open,
verify and read back identically there, and everything it writes reads here."""

import json
import os
import pathlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import deathtensors as dt
from conftest import peer_runner, sha256

ROOT = pathlib.Path(__file__).resolve().parents[3]
LEGACY_VENV = pathlib.Path(os.environ.get("DT_LEGACY_VENV", ROOT / ".venv-dt030"))

LEGACY_DTYPES = [np.bool_, np.uint8, np.int8, np.uint16, np.int16, np.float16, np.int32, np.uint32,
                 np.float32, np.int64, np.uint64, np.float64, np.complex64, np.complex128]

READ_SCRIPT = r"""
import hashlib, json, sys
import deathtensors as dt
out = {}
for path in sys.argv[1:]:
    f = dt.open(path, verify=True)
    out[path] = {
        "verify": f.verify(),
        "metadata": f.metadata(),
        "tensors": {k: {"sha256": hashlib.sha256(f.get_bytes(k)).hexdigest(), "dtype": f.info(k)["dtype"],
                         "shape": list(f.info(k)["shape"]), "metadata": f.info(k)["metadata"],
                         "value": f.get_tensor(k, framework="numpy").tobytes().hex()}
                    for k in f.keys()},
    }
print(json.dumps(out))
"""

WRITE_SCRIPT = r"""
import hashlib, json, sys
import numpy as np
import deathtensors as dt
spec = json.loads(sys.argv[1])
tensors = {k: np.frombuffer(bytes.fromhex(v["hex"]), dtype=v["dtype"]).reshape(v["shape"]) for k, v in spec["tensors"].items()}
dt.save(spec["path"], tensors, metadata=spec.get("metadata"), global_metadata=spec.get("global_metadata"),
        checksum=spec.get("checksum", False), compress=spec.get("compress", False))
print(json.dumps({k: hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest() for k, v in tensors.items()}))
"""


@pytest.fixture(scope="session")
def legacy():
    """A runner for scripts under deathtensors 0.3.0 (their stdout is JSON)."""
    raw = peer_runner(LEGACY_VENV, "deathtensors==0.3.0", "deathtensors 0.3.0")

    def run(script, *args):
        return json.loads(raw(script, *args))

    version = run("import json, deathtensors; print(json.dumps(deathtensors.__version__))")
    assert version == "0.3.0"
    return run


def sample(seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for i, d in enumerate(LEGACY_DTYPES):
        shape = [(), (0,), (3,), (2, 3), (1, 2, 2)][i % 5]
        raw = rng.integers(0, 256, size=int(np.prod(shape)) * np.dtype(d).itemsize, dtype=np.uint8)
        out[f"layer.{i}.{np.dtype(d).name}"] = (raw % 2).astype(d).reshape(shape) if d == np.bool_ else raw.view(d).reshape(shape)
    return out


@pytest.mark.parametrize("checksum", [False, True])
def test_our_files_open_verify_and_read_in_030(tmp_path, legacy, checksum):
    tensors = sample(1)
    path = tmp_path / "ours.dt"
    dt.save(path, tensors, metadata={"layer.8.float32": {"note": "ünïcödé ✓"}},
            global_metadata={"model": "x", "license": "MIT"}, checksum=checksum)
    got = legacy(READ_SCRIPT, path)[str(path)]
    assert got["verify"] is checksum
    assert got["metadata"] == {"model": "x", "license": "MIT"}
    assert list(got["tensors"]) == list(tensors)
    for k, v in tensors.items():
        t = got["tensors"][k]
        assert t["sha256"] == sha256(v.tobytes()), k
        assert t["shape"] == list(v.shape) and bytes.fromhex(t["value"]) == v.tobytes(), k
    assert got["tensors"]["layer.8.float32"]["metadata"] == {"note": "ünïcödé ✓"}


@pytest.mark.parametrize("checksum,compress", [(False, False), (True, False), (False, True), (True, True)])
def test_files_030_writes_read_here(tmp_path, legacy, checksum, compress):
    tensors = sample(2)
    path = tmp_path / "theirs.dt"
    spec = {"path": str(path), "checksum": checksum, "compress": compress,
            "metadata": {"layer.0.bool": {"k": "v"}}, "global_metadata": {"g": "1"},
            "tensors": {k: {"hex": v.tobytes().hex(), "dtype": v.dtype.str, "shape": list(v.shape)} for k, v in tensors.items()}}
    digests = legacy(WRITE_SCRIPT, json.dumps(spec))
    with dt.open(path, verify=checksum) as f:
        assert f.has_checksum() is checksum and f.is_compressed() is compress
        assert f.keys() == list(tensors) and f.metadata() == {"g": "1"}
        assert f.info("layer.0.bool")["metadata"] == {"k": "v"}
        for k, v in tensors.items():
            assert sha256(f.get_bytes(k)) == digests[k]
            got = f.get_tensor(k, framework="numpy")
            assert got.dtype == v.dtype and got.shape == v.shape and got.tobytes() == v.tobytes()


names = st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=12)
arrays = hnp.arrays(dtype=st.sampled_from(LEGACY_DTYPES), shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4))
metadata = st.dictionaries(st.text(max_size=6), st.text(max_size=6), max_size=3)


@settings(max_examples=20, deadline=None)
@given(tensors=st.dictionaries(names, arrays, max_size=6), meta=metadata, checksum=st.booleans())
def test_random_dicts_we_write_read_identically_in_030(tmp_path_factory, legacy, tensors, meta, checksum):
    path = tmp_path_factory.mktemp("ours") / "m.dt"
    dt.save(path, tensors, global_metadata=meta, checksum=checksum, durable=False)
    got = legacy(READ_SCRIPT, path)[str(path)]
    assert got["metadata"] == meta and list(got["tensors"]) == list(tensors)
    for k, v in tensors.items():
        assert got["tensors"][k]["sha256"] == sha256(v.tobytes())


@settings(max_examples=15, deadline=None)
@given(tensors=st.dictionaries(names, arrays, max_size=6), meta=metadata, checksum=st.booleans(), compress=st.booleans())
def test_random_dicts_030_writes_read_identically_here(tmp_path_factory, legacy, tensors, meta, checksum, compress):
    path = tmp_path_factory.mktemp("theirs") / "m.dt"
    spec = {"path": str(path), "checksum": checksum, "compress": compress, "global_metadata": meta,
            "tensors": {k: {"hex": v.tobytes().hex(), "dtype": v.dtype.str, "shape": list(v.shape)} for k, v in tensors.items()}}
    legacy(WRITE_SCRIPT, json.dumps(spec))
    with dt.open(path, verify=checksum) as f:
        assert f.keys() == list(tensors) and f.metadata() == meta
        for k, v in tensors.items():
            got = f.get_tensor(k, framework="numpy")
            assert got.dtype == v.dtype and got.shape == v.shape and got.tobytes() == v.tobytes()


OPEN_SCRIPT = r"""
import json, sys
import deathtensors as dt
try:
    dt.open(sys.argv[1]).get_tensor("w", framework="numpy")
    print(json.dumps("opened"))
except Exception as e:
    print(json.dumps(type(e).__name__ + ": " + str(e)))
"""


@pytest.mark.parametrize("what", ["encrypted", "signed"])
def test_030_refuses_encrypted_and_signed_files(tmp_path, legacy, what):
    """New features take flag bits that 0.3.0 refuses: they fail closed."""
    path = tmp_path / f"{what}.dt"
    w = np.arange(16, dtype=np.float32)
    if what == "encrypted":
        dt.save(path, {"w": w}, encrypt=dt.generate_key("symmetric", kid="k"))  # 0.3.0: "file uses encryption ... not yet supported"
    else:
        dt.save(path, {"w": w}, sign=dt.generate_key("ed25519"))
    got = legacy(OPEN_SCRIPT, path)
    assert got != "opened", got
    assert ("flag" if what == "signed" else "encryption") in got.lower(), got
