"""Rust's one dtype table (format's ``DTYPE_NAMES``, ``_native.dtype_table``)
names real framework dtypes of the widths it says, and the Python maps are
built from it."""

import numpy as np
import pytest

from deathtensors import _dtypes, _native
from deathtensors.errors import FormatError

TABLE = _native.dtype_table()


def test_every_header_dtype_has_a_row():
    assert set(TABLE) >= {"BOOL", "U8", "F16", "BF16", "F32", "F64", "C64", "C128", "F8_E4M3", "F8_E5M2", "F4"}
    assert all(set(row) == {"torch", "numpy", "ml_dtypes", "tensorflow", "paddle", "mlx", "carrier", "itemsize", "exotic",
                            "safetensors"}
               for row in TABLE.values())
    # safetensors 0.8 has every dtype but complex128 (format's Format::holds).
    assert [code for code, row in TABLE.items() if not row["safetensors"]] == ["C128"]


def test_torch_names_are_torch_dtypes_of_the_right_width():
    torch = pytest.importorskip("torch")
    for code, row in TABLE.items():
        dtype = getattr(torch, row["torch"], None) if row["torch"] else None
        if dtype is None:
            continue
        assert isinstance(dtype, torch.dtype), code
        if code != "F4":  # torch's float4_e2m1fn_x2 holds two elements a byte
            assert dtype.itemsize == row["itemsize"], code


def test_numpy_and_ml_dtypes_names_and_carriers():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    for code, row in TABLE.items():
        assert row["exotic"] == (row["numpy"] is None), code
        if row["numpy"]:
            assert np.dtype(row["numpy"]).itemsize == row["itemsize"], code
        if row["ml_dtypes"] and hasattr(ml_dtypes, row["ml_dtypes"]):
            assert np.dtype(getattr(ml_dtypes, row["ml_dtypes"])).itemsize == row["itemsize"], code
        if row["carrier"]:
            assert np.dtype(row["carrier"]).itemsize == row["itemsize"], code


def test_python_maps_come_from_the_table():
    assert _dtypes.ITEMSIZE == {c: r["itemsize"] for c, r in TABLE.items() if r["itemsize"]}
    assert _dtypes.TORCH_NAMES == {c: r["torch"] for c, r in TABLE.items() if r["torch"]}
    assert _dtypes.TORCH_NAMES["F8_E4M3"] == "float8_e4m3fn" and _dtypes.ITEMSIZE["BF16"] == 2


def test_checkpoint_metadata_is_checked_by_rust():
    ok = (b'{"deathtensors_dcp":1,"save_id":"0123456789abcdef","format":"deathtensors",'
          b'"files":{},"tensors":{},"values":{}}')
    _native.check_checkpoint_metadata(ok, "here")
    for data, message in [
        (ok.replace(b'"values":{}', b'"values":{},"values":{}'), "duplicate key"),
        (ok.replace(b'"values":{}', b'"values":{},"extra":1'), "unknown fields"),
        (ok.replace(b'"values":{}', b'"values":{},"storage_meta":{}'), "storage_meta needs"),
    ]:
        with pytest.raises(FormatError, match=f"invalid checkpoint metadata here: .*{message}"):
            _native.check_checkpoint_metadata(data, "here")
    assert _native.parse_rank_file_name("rank-00002-0123456789abcdef.safetensors") == (2, "0123456789abcdef")
    assert _native.parse_rank_file_name("rank-2-0123456789abcdef.dt") is None
    assert _native.check_chunk_cover([4], 4, [([0], [2]), ([1], [3])]) is not None
    assert _native.check_chunk_cover([4], 4, [([0], [2]), ([2], [2])]) is None


def test_the_drop_ins_dtype_lists_agree_with_the_table_and_the_peer():
    """The safetensors drop-in keeps the peer's own lists (its codes and
    their order); every entry names the dtype the format's table says."""
    from deathtensors.safetensors import _serialize
    from deathtensors.safetensors import numpy as st_numpy

    for name, code in _serialize._CODES.items():
        assert TABLE[code]["torch"] == name, name
    for code, ntype in st_numpy._TYPES.items():
        assert np.dtype(ntype) == np.dtype(TABLE[code]["numpy"]), code
    peer = pytest.importorskip("safetensors.numpy")
    assert list(st_numpy._TYPES) == list(peer._TYPES)
    assert {c: np.dtype(t) for c, t in st_numpy._TYPES.items()} == {c: np.dtype(t) for c, t in peer._TYPES.items()}


def test_the_paddle_drop_ins_list_agrees_with_the_table():
    paddle = pytest.importorskip("paddle")
    from deathtensors.safetensors import paddle as st_paddle

    for code, ptype in st_paddle._TYPES.items():
        assert TABLE[code]["paddle"] is not None, code
        assert getattr(paddle, TABLE[code]["paddle"]) == ptype, code
