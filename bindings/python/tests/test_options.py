"""src/options.rs: the read and write options built once from Python's
keywords (what each value becomes, and the errors bad ones get)."""

import inspect
import re

import numpy as np
import pytest

import deathtensors as dt
from deathtensors import _native

READ_KEYWORDS = ["keys", "trusted_signers", "require_signature", "require_encryption", "policy_input",
                 "max_decompressed_len", "storage_options", "max_kdf_work", "max_header_len", "signed_model"]


@pytest.mark.parametrize("f", [dt.open, dt.DtFile, dt.open_sharded])
def test_open_shows_the_read_keywords(f):
    params = inspect.signature(f).parameters
    assert [n for n, p in params.items() if p.kind is p.KEYWORD_ONLY] == READ_KEYWORDS


@pytest.mark.parametrize("value, why", [
    (float("nan"), "NaN is not a JSON number"),
    (object(), "object of type object is not JSON serializable"),
    ({(1, 2): "x"}, "keys must be str"),
])
def test_policy_input_that_is_not_json_is_refused(value, why):
    with pytest.raises(dt.DeathTensorsError, match="policy_input is not JSON") as e:
        _native.ReadOptions(policy_input=value)
    assert why in str(e.value)


def test_max_header_len_caps_a_header_and_has_a_ceiling(tmp_path):
    path = tmp_path / "m.dt"
    dt.save(path, {f"t{i}": np.zeros(1, np.float32) for i in range(100)})
    head_len = int.from_bytes(path.read_bytes()[16:24], "little")
    with dt.open(path, max_header_len=head_len) as f:
        assert len(f) == 100
    with pytest.raises(dt.FormatError, match=f"header length {head_len} exceeds the limit of {head_len - 1}"):
        dt.open(path, max_header_len=head_len - 1)
    for bad in (0, (64 << 30) + 1):
        with pytest.raises(ValueError, match=f"max_header_len {bad} is not between 1 and {64 << 30}"):
            dt.open(path, max_header_len=bad)


def test_policy_input_crosses_as_json_does(tmp_path):
    # Tuples are arrays and non-str keys strings, as json.dumps makes them.
    _native.ReadOptions(policy_input={"user": "alice", 1: (True, None, 2.5), None: [1 << 40]})


def test_storage_options_must_be_a_dict():
    with pytest.raises(TypeError, match="storage_options must be a dict, got list"):
        _native.ReadOptions(storage_options=[("aws_region", "x")])


@pytest.mark.parametrize("compress, mode", [(False, None), (None, None), (True, "chunks"), ("blob", "blob")])
def test_compress_values(tmp_path, compress, mode):
    path = tmp_path / "c.dt"
    dt.save(path, {"a": np.zeros(1 << 16, np.float32)}, compress=compress, compress_level=4)
    with dt.open(path) as f:
        c = f.compression()
        assert (c and c["mode"]) == mode
        if mode == "chunks":
            assert c["level"] == 4


def test_a_keyword_no_function_takes_is_refused_in_the_callers_name(tmp_path):
    path = str(tmp_path / "m.dt")
    dt.save(path, {"w": np.zeros(2, np.float32)})
    for call, name in [
        (lambda: dt.open(path, bogus=1), "open()"),
        (lambda: dt.DtFile(path, bogus=1), "DtFile.__init__()"),
        (lambda: dt.open_sharded(path, bogus=1), "open_sharded()"),
    ]:
        with pytest.raises(TypeError, match=re.escape(f"{name} got an unexpected keyword argument 'bogus'")):
            call()
    # The keywords the wrapped functions take, as inspect shows them.
    for f in (dt.open, dt.DtFile.__init__, dt.open_sharded):
        params = inspect.signature(f).parameters
        assert {"keys", "trusted_signers", "require_signature", "storage_options", "verify"} <= set(params), f
    with dt.open(path, verify=True, require_signature=False) as f:
        assert f.keys() == ["w"]


def test_the_typed_keywords_are_read_options_own():
    # Type checkers see open's **options as ReadKeywords (PEP 692); the
    # keywords themselves are read_options'.
    from deathtensors import _file

    assert list(_file.ReadKeywords.__annotations__) == list(inspect.signature(_file.read_options).parameters)
