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


def test_keys_of_a_large_file_are_a_lazy_sequence_equal_to_the_list(tmp_path):
    import collections.abc
    import json

    n = 100_000  # the smallest file whose names are lazy
    want = names(n)
    path = tmp_path / "m.dt"
    dt.save(path, dict.fromkeys(want, ONE), alignment=1, durable=False)
    with dt.open(path) as f:
        keys = f.keys()
        assert not isinstance(keys, list) and isinstance(keys, collections.abc.Sequence)
        assert len(keys) == n and keys == want and want == keys and not keys != want
        assert keys != want[:-1] and keys != want[::-1] and keys != tuple(want) and keys != "x"
        assert keys == f.keys()
        assert keys[0] == want[0] and keys[-1] == want[-1] and keys[12345] == want[12345]
        assert keys[10:20] == want[10:20] and keys[::-7000] == want[::-7000] and keys[5:2] == []
        with pytest.raises(IndexError):
            keys[n]
        with pytest.raises(IndexError):
            keys[-n - 1]
        assert list(keys) == want and list(iter(f)) == want and list(reversed(keys)) == want[::-1]
        assert want[777] in keys and "model.layers.100.block.0.weight" not in keys and 3 not in keys
        assert keys.index(want[4242]) == 4242 and keys.count(want[1]) == 1 and keys.count("nope") == 0
        assert keys.index(want[4242], 4242, 4243) == 4242
        with pytest.raises(ValueError):
            keys.index(want[4242], 4243)
        with pytest.raises(ValueError):
            keys.index("nope")
        assert keys + ["x"] == want + ["x"] and ["x"] + keys == ["x"] + want
        assert json.loads(json.dumps(list(keys))) == want
    # The names outlive the file's closing, as a list would.
    assert keys[1] == want[1] and len(keys) == n
    # Below the threshold: a plain list (json.dumps, deathtensors 0.3.0's callers).
    small = tmp_path / "s.dt"
    dt.save(small, dict.fromkeys(want[: n - 1], ONE), alignment=1, durable=False)
    with dt.open(small) as f:
        assert type(f.keys()) is list and f.keys() == want[: n - 1]


def test_a_repeated_name_is_reported_first_in_file_order_in_a_large_header(tmp_path):
    # A 10,000-tensor header builds its name index in two halves at once
    # (split by the names' hashes): the repeat reported is still the first
    # in file order, whichever half it and the others fall in.
    import re

    n = 10_000
    good = tmp_path / "good.dt"
    dt.save(good, dict.fromkeys(names(n), ONE), alignment=1, durable=False)
    data = bytearray(good.read_bytes())
    # Entries 9010, 9110, ..., 9810 take the names of entries 10, 110, ...,
    # 810 (the same length, so the header keeps its size).
    for k in range(9):
        late, early = names(n)[9010 + 100 * k], names(n)[10 + 100 * k]
        at = data.index(f'"{late}"'.encode())
        data[at:at + len(late) + 2] = f'"{early}"'.encode()
    bad = tmp_path / "bad.dt"
    bad.write_bytes(bytes(data))
    for _ in range(3):
        with pytest.raises(dt.DeathTensorsError, match=re.escape(names(n)[10])):
            dt.open(bad)


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
        keys = f.keys()  # lazy: no million strings
        assert len(keys) == n and keys[-1] == "model.layers.999.block.999.weight"
        assert keys.index("model.layers.777.block.123.weight") == 777_123 and "model.layers.5.block.5.weight" in keys
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
