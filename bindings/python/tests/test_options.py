"""src/options.rs: the read and write options built once from Python's
keywords (what each value becomes, and the errors bad ones get)."""

import inspect
import pathlib
import re

import numpy as np
import pytest

import deathtensors as dt
from deathtensors import _native

READ_KEYWORDS = ["keys", "trusted_signers", "require_signature", "require_encryption", "policy_input",
                 "max_decompressed_len", "storage_options", "max_kdf_work", "max_header_len", "signed_model",
                 "map_tensors"]


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
    """Tuples are arrays and non-str keys strings, as json.dumps makes them:
    a file's policy sees exactly json.loads(json.dumps(value))."""
    import json

    value = {"user": "alice", 1: (True, None, 2.5), None: [1 << 40]}
    crossed = json.loads(json.dumps(value))
    assert crossed == {"user": "alice", "1": [True, None, 2.5], "null": [1 << 40]}
    key = dt.generate_key("symmetric")
    rego = ("package model\nimport rego.v1\n"
            f"allow if input == {json.dumps(crossed)}\n")
    path = tmp_path / "policy.dt"
    dt.save(path, {"w": np.arange(4, dtype=np.float32)}, encrypt=key, global_metadata={"__policy__": rego})
    with dt.open(path, keys=key, policy_input=value) as f:
        assert f.get_tensor("w", framework="numpy").tolist() == [0, 1, 2, 3]
    # Anything else is another input: the policy refuses it.
    for other in ({"user": "alice", "1": [True, None, 2.5]}, {"user": "alice", 1: [True, None, 2.5], None: [1]}):
        with pytest.raises(dt.PolicyDeniedError):
            with dt.open(path, keys=key, policy_input=other) as f:
                f.get_tensor("w", framework="numpy")


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


# --- write options: one set of keywords for every writing function --------

WRITE_KEYWORDS = ["global_metadata", "checksum", "compress", "compress_level", "durable", "format", "alignment",
                  "encrypt", "sign", "cipher", "chunk_size", "seal_header", "drop_cache"]

_SAFETENSORS_HAS_NO_PLACE = {
    k: "safetensors has no place for it"
    for k in ("checksum", "compress", "compress_level", "alignment", "encrypt", "sign", "cipher", "chunk_size",
              "seal_header")
}
_COLLECTION_HAS_NO_PLACE = {
    k: "a collection's blocks are raw rows of one dtype and shape"
    for k in WRITE_KEYWORDS if k != "durable"
}
_CHECKPOINT_CHOOSES = {
    "global_metadata": "the checkpoint's metadata is its JSON document",
    "checksum": "digests are always recorded",
    "alignment": "tiles are laid out by block_bytes and tiles",
    **{k: "not offered for checkpoints" for k in ("compress", "compress_level", "encrypt", "sign", "cipher",
                                                  "chunk_size", "seal_header")},
}


def _writers():
    """(name, function, {missing keyword: reason}, {keyword: (default, reason)}):
    every writing function, the write keywords it does not take and the
    defaults it does not share with ``write_options``, each with the reason
    its docstring gives."""
    checksum_03 = {"checksum": (True, "deathtensors 0.3.0's default for the same function")}
    out = [
        ("save", dt.save, {}, {}),
        ("save_file", dt.save_file, {}, {}),
        ("save_sharded", dt.save_sharded, {}, checksum_03),
        ("from_safetensors", dt.from_safetensors,
         {"global_metadata": "the source's, plus where it came from", "format": "the output is deathtensors",
          **{k: "the streaming conversion does not encrypt or sign"
             for k in ("encrypt", "sign", "cipher", "chunk_size", "seal_header")}},
         checksum_03),
        ("to_safetensors", dt.to_safetensors,
         {"global_metadata": "the source's", "format": "safetensors by definition", **_SAFETENSORS_HAS_NO_PLACE}, {}),
        ("TensorBlob.open", dt.TensorBlob.open, _COLLECTION_HAS_NO_PLACE, {}),
    ]
    try:
        from deathtensors.distributed import StorageWriter
    except ImportError:  # torch.distributed missing: the rest still runs
        return out
    out.append(("distributed.StorageWriter", StorageWriter, _CHECKPOINT_CHOOSES,
                {"drop_cache": (None, "None follows durable: a checkpoint is read later, by another job")}))
    return out


WRITERS = _writers()


def test_write_keywords_are_write_options_own():
    from deathtensors import _file

    assert list(_file.WriteKeywords.__annotations__) == WRITE_KEYWORDS
    assert list(inspect.signature(_file.write_options).parameters) == WRITE_KEYWORDS


def test_the_native_write_options_and_the_stub_take_the_same_keywords_and_defaults():
    import ast

    from deathtensors import _file

    defaults = {n: p.default for n, p in inspect.signature(_file.write_options).parameters.items()}
    native = inspect.signature(_native.WriteOptions).parameters
    assert sorted(native) == sorted(WRITE_KEYWORDS)
    assert all(p.kind is p.KEYWORD_ONLY for p in native.values())
    stub = ast.parse(pathlib.Path(dt.__file__).with_name("_native.pyi").read_text(encoding="utf-8"))
    init = next(f for c in stub.body if isinstance(c, ast.ClassDef) and c.name == "WriteOptions"
                for f in c.body if isinstance(f, ast.FunctionDef) and f.name == "__init__")
    stubbed = {a.arg: ast.literal_eval(d) for a, d in zip(init.args.kwonlyargs, init.args.kw_defaults)}
    assert stubbed == defaults


@pytest.mark.parametrize("name, f, missing, defaults", WRITERS, ids=[w[0] for w in WRITERS])
def test_every_writing_function_shows_the_write_keywords(name, f, missing, defaults):
    from deathtensors import _file

    assert set(missing) <= set(WRITE_KEYWORDS), name
    params = inspect.signature(f).parameters
    shown = [k for k in WRITE_KEYWORDS if k in params]
    assert shown == [k for k in WRITE_KEYWORDS if k not in missing], f"{name}: write keywords differ from save's"
    common = {n: p.default for n, p in inspect.signature(_file.write_options).parameters.items()}
    for k in shown:
        want = defaults[k][0] if k in defaults else common[k]
        assert params[k].default == want, f"{name}({k}=...) defaults to {params[k].default!r}, not {want!r}"
        assert type(params[k].default) is type(want), name


@pytest.mark.parametrize("f", [dt.save_file, dt.from_safetensors, dt.to_safetensors])
def test_the_new_write_keywords_reach_the_file(tmp_path, f):
    # save_file, from_safetensors and to_safetensors now take save's
    # keywords: drop_cache needs durable, as in save.
    src = tmp_path / "a.safetensors"
    dt.save(src, {"w": np.arange(4, dtype=np.float32)}, format="safetensors")
    args = {dt.save_file: (tmp_path / "b.dt", [("w", "F32", [4], np.arange(4, dtype=np.float32).tobytes(), None)]),
            dt.from_safetensors: (src, tmp_path / "b.dt"),
            dt.to_safetensors: (src, tmp_path / "b.safetensors")}[f]
    with pytest.raises(ValueError, match="drop_cache=True needs durable=True"):
        f(*args, durable=False, drop_cache=True)
    f(*args, drop_cache=True)
    with dt.open(args[0] if f is dt.save_file else args[1]) as r:
        assert r.get_tensor("w", framework="numpy").tolist() == [0, 1, 2, 3]


def test_save_file_and_from_safetensors_take_alignment(tmp_path):
    data = np.arange(4, dtype=np.float32)
    aligned, plain = tmp_path / "a.dt", tmp_path / "p.dt"
    dt.save_file(aligned, [("w", "F32", [4], data.tobytes(), None)], alignment=4096)
    dt.save_file(plain, [("w", "F32", [4], data.tobytes(), None)])
    assert aligned.stat().st_size >= 4096 > plain.stat().st_size
    with dt.open(aligned) as f:
        assert f.get_tensor("w", framework="numpy").tolist() == data.tolist()
    src = tmp_path / "s.safetensors"
    dt.save(src, {"w": data}, format="safetensors")
    with pytest.raises(dt.DeathTensorsError, match="alignment"):
        dt.from_safetensors(src, tmp_path / "x.dt", alignment=3)
    dst = dt.from_safetensors(src, tmp_path / "b.dt", alignment=4096)
    assert pathlib.Path(dst).stat().st_size >= 4096
    with dt.open(dst) as f:
        assert f.get_tensor("w", framework="numpy").tolist() == data.tolist()
