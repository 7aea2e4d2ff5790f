"""Reading: every fixture with both frameworks, the DtFile API, views and errors."""

import gc
import os

import numpy as np
import pytest
import torch

import deathtensors as dt
from conftest import TESTDATA, mappings_of, sha256


def ok_fixtures(manifest):
    return [(rel, exp) for rel, exp in manifest["files"].items() if exp["outcome"] == "ok"]


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_every_fixture_reads_back_to_its_manifest(manifest, framework):
    checked = 0
    for rel, expected in ok_fixtures(manifest):
        with dt.open(TESTDATA / "valid" / rel) as f:
            assert sorted(f.keys()) == sorted(expected["tensors"])
            assert f.metadata() == expected["global_metadata"]
            for name, t in expected["tensors"].items():
                info = f.info(name)
                assert info["dtype"] == t["dtype"]
                assert info["shape"] == t["shape"]
                assert info["nbytes"] == t["nbytes"]
                assert info["metadata"] == t["metadata"]
                assert sha256(f.get_bytes(name)) == t["sha256"], (rel, name)
                try:
                    value = f.get_tensor(name, framework=framework)
                except dt.DeathTensorsError:
                    # F8 types without a numpy equivalent need ml_dtypes: it is installed here.
                    raise
                assert list(value.shape) == t["shape"], (rel, name)
                raw = value.reshape(-1).view(torch.uint8).numpy() if framework == "torch" else value.reshape(-1).view(np.uint8)
                assert sha256(raw.tobytes()) == t["sha256"], (rel, name)
                checked += 1
            if expected.get("flags", {}).get("checksum"):
                assert f.verify() is True
    assert checked > 80


def test_bitflipped_fixture_fails_verification():
    path = TESTDATA / "valid/deathtensors-0.3.0/bad_checksum_bitflip.deathtensors"
    with pytest.raises(dt.IntegrityError, match="SHA-256 footer mismatch"):
        dt.open(path, verify=True)
    f = dt.open(path)
    with pytest.raises(dt.IntegrityError):
        f.verify()
    assert issubclass(dt.IntegrityError, ValueError)


def test_verify_is_false_without_checksum():
    with dt.open(TESTDATA / "valid/deathtensors-0.3.0/all_dtypes.deathtensors") as f:
        assert f.has_checksum() is False
        assert f.verify() is False


def test_container_protocol_and_info(tmp_path):
    path = tmp_path / "m.dt"
    dt.save(path, {"b": np.zeros(3, np.float32), "a": np.ones((2, 2), np.int64)},
            metadata={"a": {"k": "v"}}, global_metadata={"model": "m"})
    f = dt.DtFile(path)
    assert f.keys() == ["b", "a"]  # insertion order
    assert len(f) == 2 and "a" in f and "zz" not in f and 3 not in f
    assert list(f) == ["b", "a"]
    info = f.info("a")
    assert info["dtype"] == "I64" and info["shape"] == [2, 2] and info["nbytes"] == 32
    assert info["data_offsets"] == (64, 96) and info["metadata"] == {"k": "v"}
    assert info["torch_dtype"] == "torch.int64" and info["aligned"] is True
    assert f.metadata() == {"model": "m"}
    assert "2 tensors" in repr(f)
    f.close()
    with pytest.raises(ValueError, match="closed"):
        f.keys()


def test_get_tensor_is_owned_and_outlives_close(tmp_path):
    path = tmp_path / "m.dt"
    dt.save(path, {"w": torch.arange(6, dtype=torch.float32)})
    before = path.read_bytes()
    with dt.open(path) as f:
        t = f.get_tensor("w")
        a = f.get_tensor("w", framework="numpy")
    t += 100
    a[:] = -1
    assert path.read_bytes() == before
    assert t.tolist() == [100.0, 101.0, 102.0, 103.0, 104.0, 105.0]
    with dt.open(path) as f:
        assert f.get_tensor("w").tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_get_tensors_matches_the_manifest_for_every_fixture(manifest, framework):
    # Whole-file loads: misaligned tensors (0.3.0 files), F4, empty tensors,
    # compressed blobs, both formats.
    checked = 0
    for rel, expected in ok_fixtures(manifest):
        with dt.open(TESTDATA / "valid" / rel) as f:
            for copy in (False, True):
                loaded = f.get_tensors(framework, copy=copy)
                assert list(loaded) == f.keys()
                for name, t in expected["tensors"].items():
                    value = loaded[name]
                    raw = value.reshape(-1).view(torch.uint8).numpy() if framework == "torch" else value.reshape(-1).view(np.uint8)
                    assert sha256(raw.tobytes()) == t["sha256"], (rel, name, copy)
                    # Aligned for its dtype in memory, mapped or copied.
                    if framework == "torch":
                        # A complex number is aligned as its parts are.
                        align = value.element_size() // (2 if value.is_complex() else 1)
                        assert value.data_ptr() % align == 0, (rel, name, copy)
                    else:
                        assert value.flags.aligned, (rel, name, copy)
                    checked += 1
    assert checked > 160


def test_torch_tensors_have_storages_of_their_own(tmp_path):
    # As safetensors' tensors do: code that finds shared tensors by storage
    # (safetensors' own save_file, transformers) must not see every loaded
    # tensor as sharing one.
    import safetensors.torch as real

    path = tmp_path / "m.dt"
    tensors = {"a": torch.arange(6, dtype=torch.float32), "b": torch.ones(2, 3, dtype=torch.bfloat16),
               "c": torch.arange(1 << 19, dtype=torch.int32)}
    dt.save(path, tensors)
    for copy in (False, True):
        loaded = dt.open(path).get_tensors(copy=copy)
        for name, value in loaded.items():
            assert value.untyped_storage().nbytes() == value.numel() * value.element_size(), (name, copy)
        real.save_file(loaded, tmp_path / "again.safetensors")  # no "tensors share memory" error
        assert all(torch.equal(v, real.load_file(tmp_path / "again.safetensors")[k]) for k, v in tensors.items())


def test_f4_with_an_odd_last_dimension_is_a_clear_error_in_torch(tmp_path):
    path = tmp_path / "f4.dt"
    dt.save_file(path, [("odd", "F4", [2, 3], bytes(3), None), ("even", "F4", [2, 4], bytes([1, 2, 3, 4]), None)])
    with dt.open(path) as f:
        assert f.get_tensor("even").shape == (2, 2)
        assert f.get_bytes("odd") == bytes(3)
        with pytest.raises(dt.DeathTensorsError, match="'odd': F4 needs an even last dimension"):
            f.get_tensor("odd")
        with pytest.raises(dt.DeathTensorsError, match="'odd': F4 needs an even last dimension"):
            f.get_tensors(framework="torch")
    even = tmp_path / "even.dt"
    dt.save_file(even, [("even", "F4", [2, 4], bytes([1, 2, 3, 4]), None)])
    loaded = dt.open(even).get_tensors(framework="torch")["even"]
    assert loaded.shape == (2, 2) and loaded.view(torch.uint8).flatten().tolist() == [1, 2, 3, 4]


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc/self/maps")
@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_large_tensors_are_private_mappings_the_caller_owns(framework, tmp_path):
    path = tmp_path / "m.dt"
    big = np.arange(1 << 19, dtype=np.float32)  # 2 MiB: mapped
    dt.save(path, {"big": big, "small": np.arange(4, dtype=np.int64)}, checksum=True)
    before = path.read_bytes()
    with dt.open(path) as f:
        one, two = f.get_tensor("big", framework), f.get_tensor("big", framework)
        assert mappings_of(path) == 2  # a mapping each: no copy, no sharing
        copied = f.get_tensor("big", framework, copy=True)
        checked = f.get_tensor("big", framework, verify=True)
        assert mappings_of(path) == 2  # copy and verify read into fresh memory
        everything = f.get_tensors(framework)
        assert mappings_of(path) == 3  # one mapping for the whole blob
        detached = f.get_tensors(framework, copy=True)
        assert mappings_of(path) == 3
    for t in (one, everything["big"], everything["small"], copied, detached["big"]):
        t[:2] = -7  # writable after close
    assert path.read_bytes() == before  # writes never reach the file...
    for t in (two, checked):  # ...nor another call's tensor
        assert t[:3].tolist() == [0.0, 1.0, 2.0]
    assert everything["small"].tolist() == [-7, -7, 2, 3]
    # Saving over the file replaces it by a rename: loaded tensors keep the
    # old bytes.
    dt.save(path, {"big": np.zeros(1 << 19, dtype=np.float32)})
    assert two[-1].item() == float((1 << 19) - 1) and everything["big"][2].item() == 2.0
    del one, two, everything, f, t
    gc.collect()
    assert mappings_of(path) == 0 and mappings_of(f"{path} (deleted)") == 0


def test_mapping_failure_falls_back_to_a_copy(tmp_path):
    path = tmp_path / "m.dt"
    dt.save(path, {"big": np.arange(1 << 19, dtype=np.float32)})

    class OutOfMappings:
        def __init__(self, reader):
            self._reader = reader

        def map_tensor(self, name):
            raise OSError(12, "Cannot allocate memory")

        def __getattr__(self, name):
            return getattr(self._reader, name)

    with dt.open(path) as f:
        f._reader = OutOfMappings(f._reader)
        t = f.get_tensor("big", framework="numpy")
    assert t[123] == 123.0 and t.flags.writeable


def test_compressed_files_load_as_copies():
    with dt.open(TESTDATA / "valid" / "deathtensors-0.3.0" / "all_dtypes_zstd_checksum.deathtensors") as f:
        assert f.is_compressed()
        loaded = f.get_tensors(framework="numpy")
        assert loaded["f32"].nbytes == 256 and loaded["f32"].flags.writeable


def test_views_are_zero_copy_and_read_only(tmp_path):
    path = tmp_path / "m.dt"
    dt.save(path, {"w": np.arange(8, dtype=np.float32)})
    f = dt.open(path)
    v = f.get_tensor_view("w", framework="numpy")
    assert v.tolist() == list(range(8)) and not v.flags.writeable
    with pytest.raises(ValueError):
        v[0] = 1
    mv = f.get_buffer("w")
    assert mv.readonly and len(mv) == 32
    tv = f.get_tensor_view("w")
    f.close()
    # Views keep the mapping alive after close.
    assert tv.tolist() == list(range(8)) and bytes(mv)[:4] == np.float32(0).tobytes()


def test_misaligned_legacy_tensor_view_is_copied():
    with dt.open(TESTDATA / "valid/deathtensors-0.3.0/edge_shapes.deathtensors") as f:
        assert f.info("after_odd")["aligned"] is False
        v = f.get_tensor_view("after_odd", framework="torch")
        assert torch.equal(v, f.get_tensor("after_odd"))


def test_errors_have_the_right_types(tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        dt.open(tmp_path / "missing.dt")
    assert "missing.dt" in str(e.value)
    bad = tmp_path / "lfs.safetensors"
    bad.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 1\n")
    with pytest.raises(dt.FormatError, match="Git LFS pointer"):
        dt.open(bad)
    path = tmp_path / "m.dt"
    dt.save(path, {"a": np.zeros(1)})
    with dt.open(path) as f, pytest.raises(KeyError) as e:
        f.get_tensor("b")
    assert isinstance(e.value, dt.TensorNotFoundError) and '"b"' in str(e.value)
    with pytest.raises(dt.DeathTensorsError, match="framework"):
        dt.open(path).get_tensor("a", framework="caffe")


def test_invalid_corpus_is_rejected_with_format_errors():
    import json

    manifest = json.loads((TESTDATA / "invalid" / "manifest.json").read_text())
    checked = 0
    for name, entry in manifest["files"].items():
        if entry.get("limits"):
            continue  # needs non-default limits (tested in Rust)
        with pytest.raises(dt.FormatError):
            dt.open(TESTDATA / "invalid" / name)
        checked += 1
    assert checked > 200


def test_compressed_legacy_files_read():
    with dt.open(TESTDATA / "valid/deathtensors-0.3.0/all_dtypes_zstd_checksum.deathtensors", verify=True) as f:
        assert f.is_compressed()
        assert f.get_tensor("f32", framework="numpy").shape == (8, 8)


def test_verify_on_read_detects_a_corrupt_tensor(tmp_path):
    path = tmp_path / "m.dt"
    dt.save(path, {"a": np.arange(100, dtype=np.int32), "b": np.ones(10)}, checksum=True)
    data = bytearray(path.read_bytes())
    off = dt.open(path).info("a")["file_offset"]
    data[off + 5] ^= 1
    path.write_bytes(bytes(data))
    f = dt.open(path)
    assert f.get_tensor("b", verify=True).sum() == 10
    with pytest.raises(dt.IntegrityError, match='"a"'):
        f.get_tensor("a", verify=True)
    with pytest.raises(dt.IntegrityError, match='"a"'):
        f.verify()


def test_loads_leave_the_garbage_collector_as_they_found_it(tmp_path):
    """Loading many tensors pauses Python's cyclic GC while they are made;
    it must be back on afterwards, after an error too, and stay off if the
    caller had turned it off."""
    import gc

    path = tmp_path / "m.dt"
    dt.save(path, {f"t{i}": np.full(3, i, np.float32) for i in range(50)})
    odd = tmp_path / "odd.dt"
    dt.save_file(odd, [("odd", "F4", [2, 3], bytes(3), None)])
    assert gc.isenabled()
    with dt.open(path) as f:
        assert len(f.get_tensors("numpy")) == 50 and gc.isenabled()
    with dt.open(odd) as f, pytest.raises(dt.DeathTensorsError, match="even last dimension"):
        f.get_tensors("torch")
    assert gc.isenabled()
    gc.disable()
    try:
        with dt.open(path) as f:
            f.get_tensors("torch")
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_shape_no_framework_can_hold_is_a_clear_error(tmp_path):
    """A zero-element tensor whose other dimensions multiply past 2^63 is a
    valid file (it has no bytes), but numpy and torch cannot make it: the
    error names the tensor, and the file's other tensors still load."""
    import json
    import struct

    import deathtensors.safetensors as dts
    import deathtensors.safetensors.numpy as dtn

    header = {
        "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "z": {"dtype": "F32", "shape": [2**63, 2**63, 0], "data_offsets": [8, 8]},
    }
    text = json.dumps(header, separators=(",", ":")).encode()
    path = tmp_path / "huge-empty.safetensors"
    path.write_bytes(struct.pack("<Q", len(text)) + text + np.array([1.5, 2.5], np.float32).tobytes())
    with dt.open(path) as f:
        assert sorted(f.keys()) == ["a", "z"]
        assert f.get_tensor("a", framework="numpy").tolist() == [1.5, 2.5]
        for framework in ("numpy", "torch"):
            with pytest.raises(dt.DeathTensorsError, match="tensor 'z'.*cannot be made a"):
                f.get_tensors(framework=framework)
            with pytest.raises(dt.DeathTensorsError, match="tensor 'z'"):
                f.get_tensor("z", framework=framework)
    with pytest.raises(dts.SafetensorError, match=r"shape \[9223372036854775808"):
        dtn.load_file(path)


def test_views_of_f4_tensors_in_torch(tmp_path):
    if not hasattr(torch, "float4_e2m1fn_x2"):
        pytest.skip("this torch has no float4_e2m1fn_x2")
    path = tmp_path / "f4.dt"
    dt.save(path, {"f": ("F4", [2, 4], b"\x12\x34\x56\x78")})
    with dt.open(path) as f:
        v = f.get_tensor_view("f")
        assert v.dtype == torch.float4_e2m1fn_x2 and list(v.shape) == [2, 2]
        assert v.view(torch.uint8).flatten().tolist() == [0x12, 0x34, 0x56, 0x78]


def _flip_a_bit_of(path, value):
    """Damages the file at `path`: flips the low bit of the first byte of
    `value`'s bytes (a numpy scalar) where they first appear in it."""
    data = bytearray(path.read_bytes())
    data[data.find(value.tobytes())] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_batch_of_region_reads_checks_everything_first_and_zeroes_all_on_failure(tmp_path):
    """The native batch the distributed reader uses: whole tensors (region
    None) and column bands in one call, two tensors hashed side by side;
    overlapping buffers, a bad region or a damaged tensor fail it with the
    tensor named."""
    from deathtensors import _native

    a = np.arange(300 * 517, dtype=np.float32).reshape(300, 517)
    b = np.arange(65 * 4096, dtype=np.int32).reshape(65, 4096)
    path = tmp_path / "m.dt"
    dt.save(path, {"a": a, "b": b}, checksum=True)
    r = _native.Reader(str(path), mmap=False)
    whole_a = np.full_like(a, -1)
    band_b = np.zeros((65, 1000), dtype=np.int32)
    r.read_regions_into([
        ("a", None, whole_a.view(np.uint8), True, None),
        ("b", [(0, 65), (3000, 1000)], band_b.view(np.uint8), True, None),
    ])
    assert np.array_equal(whole_a, a) and np.array_equal(band_b, b[:, 3000:4000])
    # The checkpoint's digest instead of the file's.
    band_b[:] = 0
    r.read_regions_into([("b", [(0, 65), (3000, 1000)], band_b.view(np.uint8), True, sha256(b.tobytes()))])
    assert np.array_equal(band_b, b[:, 3000:4000])
    one = np.zeros(4, dtype=np.uint8)
    with pytest.raises(ValueError, match="overlap"):
        r.read_regions_into([("a", [(0, 1), (0, 1)], one, True, None), ("a", [(1, 1), (0, 1)], one[:], True, None)])
    with pytest.raises(dt.DeathTensorsError, match=r'"b".*dimension 1 is 4096 long'):
        r.read_regions_into([("a", None, whole_a.view(np.uint8), True, None), ("b", [(0, 1), (4096, 1)], one, True, None)])
    r.close()
    _flip_a_bit_of(path, a[299, 516])
    r = _native.Reader(str(path), mmap=False)
    whole_a[:] = 7
    band_b[:] = 7
    with pytest.raises(dt.IntegrityError, match='"a"'):
        r.read_regions_into([
            ("b", [(0, 65), (3000, 1000)], band_b.view(np.uint8), True, None),
            ("a", None, whole_a.view(np.uint8), True, None),
        ])
    assert not whole_a.any() and not band_b.any()
    r.close()


def test_placed_region_reads_fill_their_columns_of_one_buffer(tmp_path):
    """`read_regions_placed`: column tiles (and parts of them) read straight
    to their columns of one tensor (rows at a stride), checked; buffers that
    overlap and placements that do not fit are refused before any read; a
    failed batch zeroes only the bytes it places."""
    from deathtensors import _native

    m = np.arange(40 * 24, dtype=np.float32).reshape(40, 24)
    path = tmp_path / "tiles.dt"
    dt.save(path, {f"m@0,{c}": m[:, c:c + 6] for c in range(0, 24, 6)}, checksum=True)
    r = _native.Reader(str(path), mmap=False)
    full = np.full_like(m, -1)
    row = 24 * 4
    reads = [(f"m@0,{c}", None, 0, (c * 4, 6 * 4, row), True, None) for c in range(0, 24, 6)]
    r.read_regions_placed(reads, [full.view(np.uint8)])
    assert np.array_equal(full, m)
    # Columns 4..14 of rows 3..33 from three tiles, into a [30, 10] tensor.
    band = np.zeros((30, 10), dtype=np.float32)
    parts = [("m@0,0", 4, 2, 0), ("m@0,6", 0, 6, 2), ("m@0,12", 0, 2, 8)]
    r.read_regions_placed(
        [(name, [(3, 30), (c, w)], 0, (at * 4, w * 4, 40), True, None) for name, c, w, at in parts], [band.view(np.uint8)]
    )
    assert np.array_equal(band, m[3:33, 4:14])
    with pytest.raises(ValueError, match="overlap"):
        r.read_regions_placed(reads[:1], [full.view(np.uint8), full.view(np.uint8)[8:]])
    with pytest.raises(dt.DeathTensorsError, match=r'"m@0,6".*does not fit'):
        r.read_regions_placed([("m@0,6", None, 0, (row - 8, 24, row), True, None)], [full.view(np.uint8)])
    with pytest.raises(dt.DeathTensorsError, match="no buffer 1"):
        r.read_regions_placed([("m@0,6", None, 1, (0, 24, row), True, None)], [full.view(np.uint8)])
    r.close()
    _flip_a_bit_of(path, m[39, 11])
    r = _native.Reader(str(path), mmap=False)
    full[:] = 7
    with pytest.raises(dt.IntegrityError, match='"m@0,6"'):
        r.read_regions_placed(reads[:2], [full.view(np.uint8)])
    assert not full[:, :12].any() and (full[:, 12:] == 7).all()
    r.close()


def test_native_info_is_a_typed_record(tmp_path):
    # The native Reader.info is a TensorInfo with named fields (no
    # positional tuple), and DtFile.info is built from it.
    from deathtensors import _native

    path = tmp_path / "m.dt"
    dt.save(path, {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.zeros(1, np.int8)},
            metadata={"w": {"k": "v"}}, checksum=True)
    r = _native.Reader(str(path))
    info = r.info("w")
    assert isinstance(info, _native.TensorInfo) and not isinstance(info, tuple)
    assert (info.dtype, info.shape, info.metadata, info.aligned) == ("F32", [2, 3], {"k": "v"}, True)
    start, end = info.data_offsets
    assert end - start == 24 and len(info.sha256) == 64
    assert path.read_bytes()[info.file_offset:info.file_offset + 24] == np.arange(6, dtype=np.float32).tobytes()
    with pytest.raises(AttributeError):
        info.dtype = "F16"
    with dt.open(path) as f:
        d = f.info("w")
        assert (d["dtype"], d["shape"], d["data_offsets"], d["sha256"], d["file_offset"], d["aligned"]) == (
            "F32", [2, 3], info.data_offsets, info.sha256, info.file_offset, True)
    assert r.info("b").sha256 is not None and r.info("b").metadata == {}
    r.close()


def test_maps_tensors_is_the_one_mapping_decision(tmp_path):
    # Plain local files map; compressed, encrypted and signed ones (checked
    # reads) never do: get_tensor_view refuses them, get_tensor reads.
    from deathtensors import _native

    t = {"w": np.arange(1 << 16, dtype=np.float32)}
    key = dt.generate_key("symmetric", kid="k")
    signer = dt.generate_key("ed25519", kid="s")
    cases = {
        "plain": ({}, {}, True),
        "compressed": ({"compress": True}, {}, False),
        "encrypted": ({"encrypt": key}, {"keys": key}, False),
        "signed": ({"sign": signer}, {}, False),
    }
    for what, (save_kw, open_kw, maps) in cases.items():
        path = tmp_path / f"{what}.dt"
        dt.save(path, t, **save_kw)
        opts = dt._file.read_options(**open_kw)
        r = _native.Reader(str(path), opts)
        assert r.maps_tensors() is maps, what
        r.close()
        with dt.open(path, **open_kw) as f:
            assert np.array_equal(f.get_tensor("w", framework="numpy"), t["w"]), what
            if not maps:
                with pytest.raises(dt.DeathTensorsError):
                    f.get_tensor_view("w", framework="numpy")


def test_a_directory_is_named_as_one_saying_what_it_holds(tmp_path):
    """A directory where a file is wanted: IsADirectoryError (as the system
    would give), in words that say what it holds and what to do."""
    plain, ckpt = tmp_path / "plain", tmp_path / "step-1000"
    plain.mkdir()
    ckpt.mkdir()
    (ckpt / "deathtensors.json").write_text("{}")
    with pytest.raises(IsADirectoryError, match="plain: is a directory, not a tensor file$"):
        dt.open(plain)
    with pytest.raises(IsADirectoryError, match=r"not a tensor file: it holds a distributed checkpoint \(`deathtensors consolidate"):
        dt.open(ckpt)
