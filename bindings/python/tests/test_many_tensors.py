"""Files of many tiny tensors (issue 51): headers no larger than
safetensors' for the same tensors, no padding beyond the alignment, lookup
by name, and safetensors' own cap kept for safetensors files (with the way
out named). The million-tensor cases are ``slow``; the 10-million case is
the benchmark's (``benches/many_bench.py``)."""

import numpy as np
import pytest

import deathtensors as dt
from deathtensors import safetensors as st_dropin
from deathtensors.safetensors import numpy as st_numpy

ONE = np.arange(4, dtype=np.float32)


def names(n):
    return [f"model.layers.{i // 1000}.block.{i % 1000}.weight" for i in range(n)]


def head(path):
    data = path.read_bytes()
    if data[:8] == b"DTLEGION":
        return data[24:24 + int.from_bytes(data[16:24], "little")]
    return data[8:8 + int.from_bytes(data[:8], "little")]


def test_empty_tensor_metadata_is_not_written_and_metadata_roundtrips(tmp_path):
    path = tmp_path / "m.dt"
    dt.save(path, {"a": ONE, "b": ONE}, metadata={"b": {"unit": "m"}})
    text = head(path)
    assert b'"metadata":{}' not in text
    assert b'"metadata":{"unit":"m"}' in text
    with dt.open(path) as f:
        assert f.info("a")["metadata"] == {}
        assert f.info("b")["metadata"] == {"unit": "m"}


@pytest.mark.parametrize("alignment, blob", [(1, 16 * 1000), (4, 16 * 1000), (64, 64 * 999 + 16)])
def test_tiny_tensors_are_padded_only_to_the_alignment(tmp_path, alignment, blob):
    path = tmp_path / "m.dt"
    dt.save(path, dict.fromkeys(names(1000), ONE), alignment=alignment)
    with dt.open(path) as f:
        last = f.info(names(1000)[-1])["data_offsets"]
        assert last[1] == blob


@pytest.mark.slow
def test_a_million_tensors_save_open_and_load_in_a_header_no_larger_than_safetensors(tmp_path):
    n = 1_000_000
    tensors = dict.fromkeys(names(n), ONE)
    ours, theirs = tmp_path / "m.dt", tmp_path / "m.safetensors"
    dt.save(ours, tensors, alignment=1, durable=False)
    st_numpy.save_file(tensors, theirs)
    # Same bytes per tensor; the fixed fields and padding differ by < 200.
    assert len(head(ours)) <= len(head(theirs)) + 200
    assert ours.stat().st_size <= theirs.stat().st_size + 200
    with dt.open(ours) as f:
        assert len(f) == n
        np.testing.assert_array_equal(f.get_tensor("model.layers.777.block.123.weight", framework="numpy"), ONE)
        assert "model.layers.1000.block.0.weight" not in f
    with st_dropin.safe_open(ours, framework="np") as f:
        np.testing.assert_array_equal(f.get_tensor("model.layers.999.block.999.weight"), ONE)
    with dt.open(ours) as f:
        loaded = f.get_tensors(framework="numpy")
    assert len(loaded) == n
    np.testing.assert_array_equal(loaded["model.layers.0.block.0.weight"], ONE)


@pytest.mark.slow
def test_safetensors_cap_is_kept_for_safetensors_files_and_names_the_way_out(tmp_path):
    # 1.1 M tensors with these names need a safetensors header over
    # 100,000,000 bytes: safetensors would refuse to read it.
    tensors = dict.fromkeys(names(1_100_000), ONE)
    for save in (lambda p: st_numpy.save_file(tensors, p), lambda p: dt.save(p, tensors, format="safetensors")):
        path = tmp_path / "m.safetensors"
        with pytest.raises(Exception, match="safetensors' cap of 100000000 bytes.*deathtensors format") as e:
            save(path)
        assert "header length" in str(e.value)
        assert not path.exists()
    dt.save(tmp_path / "m.dt", tensors, alignment=1, durable=False)
    with dt.open(tmp_path / "m.dt") as f:
        assert len(f) == 1_100_000
