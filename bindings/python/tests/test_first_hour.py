"""What a newcomer meets in the first hour (issue 49): errors that say what
to do, safetensors' call shapes, readable reprs, and what a signature proves."""

import os
import sys

import numpy as np
import pytest

import deathtensors as dt


def _plain(tmp_path, name="m.dt", **kw):
    path = tmp_path / name
    dt.save(path, {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}, checksum=True, **kw)
    return path


@pytest.mark.parametrize("framework,module", [("torch", "torch"), ("pt", "torch"), ("numpy", "numpy")])
def test_a_missing_framework_names_its_package_and_the_alternative(tmp_path, monkeypatch, framework, module):
    path = _plain(tmp_path)
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    with dt.open(path) as f:
        with pytest.raises(ImportError) as e:
            f.get_tensor("w", framework=framework)
        message = str(e.value)
        assert f"needs the optional package '{module}'" in message and f"pip install {module}" in message
        assert "framework=" in message
        with pytest.raises(ImportError, match="framework="):
            f.get_tensors(framework=framework)


def test_load_file_and_both_save_file_orders(tmp_path):
    a = np.arange(4, dtype=np.float32)
    # safetensors' order: save_file(tensors, path, metadata=None)
    dt.save_file({"a": a}, tmp_path / "x.dt")
    dt.save_file({"a": a}, str(tmp_path / "y.dt"), metadata={"k": "v"})
    loaded = dt.load_file(tmp_path / "x.dt", framework="numpy")
    assert list(loaded) == ["a"] and np.array_equal(loaded["a"], a)
    with dt.open(tmp_path / "y.dt") as f:
        assert f.metadata() == {"k": "v"}
    # deathtensors 0.3.0's order keeps working: save_file(path, [(name, dtype, shape, bytes, metadata)])
    dt.save_file(tmp_path / "z.dt", [("a", "F32", [4], a.tobytes(), {"m": "1"})], {"g": "1"})
    with dt.open(tmp_path / "z.dt") as f:
        assert np.array_equal(f.get_tensor("a", framework="numpy"), a)
        assert f.metadata() == {"g": "1"} and f.info("a")["metadata"] == {"m": "1"}


def test_save_sharded_creates_its_folder(tmp_path):
    shards = dt.save_sharded(tmp_path / "out" / "deeper" / "model", {"a": np.zeros(4, np.float32)})
    assert all(os.path.exists(s) for s in shards)
    with dt.open_sharded(tmp_path / "out" / "deeper" / "model.deathtensors.index.json") as f:
        assert f.keys() == ["a"]
        assert repr(f) == f"<ShardedFile {os.fspath(f.path)!r} (1 tensors in 1 shard)>"
    assert "-of-0003." not in dt.save_sharded.__doc__


def test_closed_file_errors_name_the_file(tmp_path):
    path = _plain(tmp_path)
    f = dt.open(path)
    f.close()
    with pytest.raises(ValueError, match="closed file: .*m.dt"):
        f.get_tensor("w", framework="numpy")
    assert "closed" in repr(f)


def test_an_empty_tensor_name_is_a_clear_error(tmp_path):
    with pytest.raises(dt.DeathTensorsError) as e:
        dt.save(tmp_path / "k.dt", {"": np.zeros(2, np.float32)})
    assert "empty tensor name" in str(e.value)
    assert "invalid file" not in str(e.value)
    assert not (tmp_path / "k.dt").exists()


def test_a_plain_file_is_not_a_collection(tmp_path, manifest):
    """Each kind of file is named as the format crate names it (issue 59:
    a second sniffer in Python called every bintensors file "a file")."""
    path = _plain(tmp_path, "a.dt")
    with pytest.raises(FileNotFoundError, match="is a deathtensors file, not a collection"):
        dt.TensorBlob.open(path, "r")
    import pathlib

    valid = pathlib.Path(__file__).resolve().parents[3] / "testdata" / "valid"
    kinds = {"bintensors-0.2.0": "a bintensors file", "safetensors-0.8.0": "a safetensors file",
             "deathtensors-0.3.0": "a deathtensors file"}
    seen = set()
    for rel, entry in manifest["files"].items():
        folder = rel.split("/")[0]
        if entry["outcome"] != "ok" or folder not in kinds or rel.endswith(".json"):
            continue
        with pytest.raises(FileNotFoundError, match=f"is {kinds[folder]}, not a collection"):
            dt.TensorBlob.open(valid / rel, "r")
        seen.add(folder)
    assert seen == set(kinds)
    pickle = tmp_path / "m.bin"
    pickle.write_bytes(b"\x80\x02}q\x00.")
    with pytest.raises(FileNotFoundError, match="is a Python pickle"):
        dt.TensorBlob.open(pickle, "r")


def test_keyring_repr_names_keys_never_secrets():
    team = dt.generate_key("symmetric", kid="team")
    signer = dt.generate_key("ed25519", kid="pub")
    ring = dt.KeyRing()
    ring.add_jwk_json(__import__("json").dumps({"keys": [team, signer]}))
    text = repr(ring)
    assert text.startswith("KeyRing(symmetric \"team\"") and dt.fingerprint(signer) in text
    assert team["k"] not in text and signer["d"] not in text
    assert repr(dt.KeyRing()) == "KeyRing(empty)"


def test_signers_say_what_a_signature_proves(tmp_path):
    mallory = dt.generate_key("ed25519", kid="mallory")
    path = _plain(tmp_path)
    dt.sign_file(path, mallory)
    with dt.open(path) as f:
        [s] = f.signers()
        assert s == dt.fingerprint(mallory)  # still the fingerprint string
        assert (s.kid, s.trusted) == (None, False)
        assert "signature valid, but its key is not trusted" in repr(s) and "trusted_signers=" in repr(s)
        assert "verified" not in repr(s)
        assert "key not trusted" in repr(f)
    with dt.open(path, trusted_signers=dt.public_key(mallory)) as f:
        [s] = f.signers()
        assert (s.kid, s.trusted) == ("mallory", True)
        assert "verified, a key you trust" in repr(s) and "mallory" in repr(s)
        assert "'mallory'" in repr(f) and "trusted key" in repr(f)



@pytest.mark.parametrize("signed", [False, True])
def test_a_truncated_file_says_so_with_the_sizes(tmp_path, signed):
    path = _plain(tmp_path)
    if signed:
        dt.sign_file(path, dt.generate_key("ed25519", kid="me"))
    data = path.read_bytes()
    short = tmp_path / "short.dt"
    short.write_bytes(data[:-7])
    with pytest.raises(dt.FormatError) as e:
        dt.open(short)
    message = str(e.value)
    assert "truncated" in message and str(len(data)) in message and str(len(data) - 7) in message, message
    assert "short.dt" in message and "bad magic" not in message, message


def test_public_objects_have_readable_reprs(tmp_path):
    path = _plain(tmp_path)
    with dt.open(path) as f:
        assert repr(f) == f"<DtFile {str(path)!r} (1 tensor)>"
    schema = dt.Schema().expect("w", dtype="F32", shape=[2, 3]).allow_extra()
    assert repr(schema) == "Schema(expects 'w' (dtype='F32', shape=[2, 3]), extra tensors allowed)"
    from deathtensors import safetensors as st
    f = st.safe_open(str(path), "np")
    assert repr(f) == f"<safe_open {str(path)!r} (framework='numpy', device='cpu')>"
    with f:
        pass
    assert repr(f) == f"<safe_open {str(path)!r} (closed)>"


def test_checkpoint_storage_reprs_never_show_option_values(tmp_path):
    pytest.importorskip("torch")
    from deathtensors.distributed import StorageReader, StorageWriter

    w = StorageWriter(tmp_path / "ckpt", storage_options={"aws_secret_access_key": "s3cr3t"})
    assert repr(w) == f"StorageWriter({str(tmp_path / 'ckpt')!r}, format='deathtensors', storage_options=[aws_secret_access_key])"
    r = StorageReader(tmp_path / "ckpt", storage_options={"token": "s3cr3t"}, allow_pickle=True)
    assert "s3cr3t" not in repr(r) and repr(r).startswith(f"StorageReader({str(tmp_path / 'ckpt')!r}, storage_options=[token]")
    assert "allow_pickle=True" in repr(r)


def test_a_missing_framework_suggests_only_installed_ones(tmp_path, monkeypatch):
    """Without numpy, the error suggests no framework that is not installed
    either (issue 61): here only torch is."""
    import importlib.util

    from deathtensors import _frameworks

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: real(name, *a) if name == "torch" else None)
    message = str(_frameworks.missing("numpy"))
    assert "pass framework= one that is installed ('torch')" in message, message
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    assert "no other framework is installed" in str(_frameworks.missing("numpy"))


@pytest.mark.parametrize("method", ["get_tensor", "get_tensor_view", "info", "get_bytes", "stats", "verify_tensor"])
def test_a_tensor_name_that_is_not_a_string_is_named(tmp_path, method):
    """get_tensor(0) said "'int' object cannot be converted to 'PyString'"
    (issue 61): now it says names are strings and which key it got."""
    with dt.open(_plain(tmp_path)) as f:
        with pytest.raises(TypeError, match=r"tensor names are strings: got int 0 \(f.keys\(\) lists the names\)"):
            getattr(f, method)(0)
        assert f.info("w")["shape"] == [2, 3]


def test_the_torch_extra_brings_numpy():
    """pip install "deathtensors[torch]" alone runs every torch example of
    the README, several of which go through numpy (the drop-in's save_file,
    DCP loads, TensorBlob rows): the extra brings it (issue 61)."""
    import tomllib

    pyproject = os.path.join(os.path.dirname(__file__), "..", "pyproject.toml")
    with open(pyproject, "rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    assert any(req.startswith("numpy") for req in extras["torch"]), extras["torch"]
