"""A save is one native call: ``_native.save`` takes the dict of tensors,
their metadata and the options; the native collection decides which torch
tensors are taken as they are (``_convert.torch_resolved`` makes any other
one, or names the refusal), and ``_convert.to_buffer`` converts every other
odd value."""

import collections
import types

import numpy as np
import pytest
import torch

import deathtensors as dt
from deathtensors import _convert, _native
from deathtensors._file import write_options as _options


def test_one_native_call_takes_a_dict_its_metadata_and_the_options(tmp_path):
    path = tmp_path / "m.dt"
    tensors = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": torch.arange(4, dtype=torch.int64)}
    _native.save(str(path), tensors, _options(checksum=True), metadata={"a": {"unit": "m"}})
    with dt.open(path) as f:
        assert f.get_tensor("a", framework="numpy").tolist() == [[0, 1, 2], [3, 4, 5]]
        assert f.get_tensor("b", framework="torch").tolist() == [0, 1, 2, 3]
        assert f.info("a")["metadata"] == {"unit": "m"}
    # The same bytes as the public save.
    dt.save(tmp_path / "p.dt", tensors, metadata={"a": {"unit": "m"}}, checksum=True)
    assert path.read_bytes() == (tmp_path / "p.dt").read_bytes()


def test_a_mapping_that_is_not_a_dict_is_taken(tmp_path):
    tensors = types.MappingProxyType(collections.OrderedDict(x=np.ones(3, np.float32)))
    _native.save(str(tmp_path / "m.dt"), tensors, _options())
    with dt.open(tmp_path / "m.dt") as f:
        assert f.get_tensor("x", framework="numpy").tolist() == [1, 1, 1]


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.arange(12.0).reshape(3, 4).t(),  # transposed
        lambda: torch.arange(12.0).reshape(3, 4)[:, 1:3],  # rows of a larger tensor
        lambda: -torch.arange(6.0),  # a negative bit
        lambda: torch.complex(torch.arange(4.0), torch.ones(4)).conj(),  # a conjugate bit
        lambda: torch.arange(4.0).expand(3, 4),  # an expanded view
    ],
)
def test_torch_views_are_saved_with_the_values_the_caller_sees(tmp_path, make):
    t = make()
    dt.save(tmp_path / "m.dt", {"t": t})
    with dt.open(tmp_path / "m.dt") as f:
        got = f.get_tensor("t", framework="torch")
    assert got.dtype == t.dtype and got.shape == t.shape
    assert torch.equal(got, t.resolve_conj().resolve_neg())


def test_f4_tensors_count_two_values_a_byte_whether_contiguous_or_not(tmp_path):
    if not hasattr(torch, "float4_e2m1fn_x2"):
        pytest.skip("this torch has no float4_e2m1fn_x2")
    raw = torch.tensor([[0x12, 0x34, 0x56], [0x78, 0x9A, 0xBC]], dtype=torch.uint8)
    whole = raw.view(torch.float4_e2m1fn_x2)
    cols = whole[:, :2]  # not contiguous: converted, then taken
    dt.save(tmp_path / "m.dt", {"whole": whole, "cols": cols})
    with dt.open(tmp_path / "m.dt") as f:
        assert f.info("whole")["shape"] == [2, 6] and f.info("cols")["shape"] == [2, 4]
        assert f.get_bytes("whole") == bytes([0x12, 0x34, 0x56, 0x78, 0x9A, 0xBC])
        assert f.get_bytes("cols") == bytes([0x12, 0x34, 0x78, 0x9A])


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor")
def test_refusals_name_the_tensor_and_leave_no_file(tmp_path):
    path = tmp_path / "m.dt"
    cases = {
        "sparse": (torch.eye(3).to_sparse(), "to_dense"),
        "meta": (torch.empty(3, device="meta"), "meta tensors"),
        "quantized": (torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.qint8), "quantized"),
    }
    for name, (value, why) in cases.items():
        with pytest.raises(dt.DeathTensorsError, match=f"tensor '{name}'.*{why}"):
            dt.save(path, {"ok": torch.ones(2), name: value})
        assert not path.exists()


def test_a_torch_dtype_the_format_lacks_is_named(tmp_path):
    unsupported = getattr(torch, "uint1", None) or getattr(torch, "bits8", None)
    if unsupported is None:
        pytest.skip("this torch has no dtype outside the format's table")
    try:
        t = torch.empty(8, dtype=unsupported)
    except (RuntimeError, TypeError) as e:
        pytest.skip(f"cannot make a {unsupported} tensor here: {e}")
    with pytest.raises(dt.DeathTensorsError, match=f"tensor 'u': torch dtype {unsupported} cannot be stored"):
        dt.save(tmp_path / "m.dt", {"u": t})


def test_a_collection_is_written_from_the_same_native_collection(tmp_path):
    with dt.TensorBlob.open(tmp_path / "blob", "w", dtype=torch.float32, shape=(4,)) as blob:
        base = torch.arange(24.0).reshape(3, 8)
        assert blob.write(base[:, 2:6]) == 3  # rows of a larger tensor, taken where they are
        assert blob.write(np.full((1, 4), 7, np.float32)) == 1
    with dt.TensorBlob.open(tmp_path / "blob", "r") as blob:
        rows = blob.read()
    assert torch.equal(torch.as_tensor(np.asarray(rows))[:3], base[:, 2:6])
    assert np.asarray(rows)[3].tolist() == [7, 7, 7, 7]


def test_the_collection_says_what_it_took():
    c = _native.collect({"a": torch.zeros(2, 3, dtype=torch.bfloat16), "b": np.zeros(5, np.uint16)})
    assert len(c) == 2
    assert (c.dtype(0), c.shape(0), c.dtype(1), c.shape(1)) == ("BF16", [2, 3], "U16", [5])
    with pytest.raises(IndexError, match="no tensor 2 of 2"):
        c.dtype(2)


def test_to_buffer_is_never_handed_a_torch_tensor():
    with pytest.raises(dt.DeathTensorsError, match="tensor 'x': torch tensors are saved from a dict"):
        _convert.to_buffer("x", torch.ones(2))


def test_metadata_without_a_dict_of_tensors_is_refused_not_lost(tmp_path):
    items = [("x", "F32", [1], b"\0\0\x80?", None)]
    with pytest.raises(TypeError, match="metadata= goes with a dict of tensors"):
        _native.save(str(tmp_path / "m.dt"), items, _options(), metadata={"x": {"a": "b"}})
    assert not (tmp_path / "m.dt").exists()
