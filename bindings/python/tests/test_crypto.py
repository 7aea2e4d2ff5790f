"""Encrypted and signed files from Python: every recipient kind and cipher,
numpy and torch, keys from dicts, files, the registry and the environment,
requirements that refuse downgrades, and tampering that never returns data."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import deathtensors as dt


def sample():
    rng = np.random.default_rng(7)
    return {
        "big": rng.standard_normal((300, 1000)).astype(np.float32),  # 1.2 MB: several chunks
        "small": np.arange(10, dtype=np.int64),
        "empty": np.zeros((0, 3), dtype=np.float16),
        "scalar": np.array(3.5, dtype=np.float64),
    }


def same(got, want):
    assert set(got) == set(want)
    for k, v in want.items():
        g = np.asarray(got[k])
        assert g.dtype == v.dtype and g.shape == v.shape and g.tobytes() == v.tobytes(), k


@pytest.fixture
def sym():
    return dt.generate_key("symmetric", kid="team")


@pytest.mark.parametrize("cipher", ["AES-256-GCM", "CHACHA20-POLY1305"])
def test_round_trip_symmetric(tmp_path, sym, cipher):
    path = tmp_path / "m.dt"
    dt.save(path, sample(), encrypt=sym, cipher=cipher, chunk_size=1 << 16, checksum=True)
    with dt.open(path, keys=[sym]) as f:
        assert f.is_encrypted()
        assert f.encryption() == {"cipher": cipher, "chunk_size": 1 << 16,
                                  "recipients": [{"kind": "symmetric", "kid": "team"}]}
        same(f.get_tensors(framework="numpy"), sample())
        same({k: f.get_tensor(k, framework="numpy") for k in f.keys()}, sample())
        same({k: f.get_tensor(k, framework="numpy", verify=True) for k in f.keys()}, sample())
        assert f.verify() is True


def test_torch_round_trip(tmp_path, sym):
    torch = pytest.importorskip("torch")
    t = {"w": torch.randn(64, 64), "b": torch.arange(5, dtype=torch.bfloat16)}
    path = tmp_path / "t.dt"
    dt.save(path, t, encrypt=sym)
    with dt.open(path, keys=sym) as f:
        got = f.get_tensors()
    for k in t:
        assert torch.equal(got[k], t[k]), k


def test_x25519_and_passphrase_recipients(tmp_path):
    alice = dt.generate_key("x25519", kid="alice")
    pub = dt.public_key(alice)
    assert "d" not in pub and pub["x"] == alice["x"]
    path = tmp_path / "m.dt"
    dt.save(path, sample(), encrypt=[pub, dt.Passphrase("open sesame")])
    with dt.open(path, keys=alice) as f:
        same(f.get_tensors(framework="numpy"), sample())
    with dt.open(path, keys=dt.Passphrase("open sesame")) as f:
        same(f.get_tensors(framework="numpy", copy=True), sample())
    assert "sesame" not in repr(dt.Passphrase("open sesame"))
    with pytest.raises(dt.DecryptionError):
        dt.open(path, keys=dt.Passphrase("wrong"))
    # Our writer's Argon2 cost is 64 MiB x 3 passes: 196,608 KiB-passes.
    with dt.open(path, keys=dt.Passphrase("open sesame"), max_kdf_work=196_608) as f:
        same(f.get_tensors(framework="numpy"), sample())
    with pytest.raises(dt.DeathTensorsError, match="196608 KiB-passes.*max_kdf_work") as e:
        dt.open(path, keys=dt.Passphrase("open sesame"), max_kdf_work=196_607)
    assert not isinstance(e.value, dt.DecryptionError)


def test_wrong_and_missing_keys(tmp_path, sym):
    path = tmp_path / "m.dt"
    dt.save(path, sample(), encrypt=sym)
    other = dt.generate_key("symmetric", kid="team")
    with pytest.raises(dt.DecryptionError) as e:
        dt.open(path, keys=other)
    assert not isinstance(e.value, dt.NoKeyError)
    with pytest.raises(dt.NoKeyError, match='"team"'):
        dt.open(path, keys=dt.generate_key("symmetric", kid="someone-else"))
    # No key at all: the header is readable, the data is not.
    with dt.open(path) as f:
        assert f.keys() and f.is_encrypted()
        with pytest.raises(dt.NoKeyError):
            f.get_tensor("small", framework="numpy")
        with pytest.raises(dt.DeathTensorsError, match="encrypted"):
            f.get_tensor_view("small", framework="numpy")


def test_keys_from_files_registry_and_environment(tmp_path, sym, monkeypatch):
    path = tmp_path / "m.dt"
    dt.save(path, sample(), encrypt=sym)
    key_file = tmp_path / "keys.jwk"
    key_file.write_text(json.dumps({"keys": [sym]}))
    with dt.open(path, keys=str(key_file)) as f:
        same(f.get_tensors(framework="numpy"), sample())
    dt.register_keys([sym])
    try:
        with dt.open(path) as f:
            same(f.get_tensors(framework="numpy"), sample())
    finally:
        dt.register_keys()
    monkeypatch.setenv("DEATHTENSORS_KEYS", json.dumps(sym))
    with dt.open(path) as f:
        same(f.get_tensors(framework="numpy"), sample())
    # A key file's path works too (issue 61: "team.jwk" was "not JWK JSON").
    monkeypatch.setenv("DEATHTENSORS_KEYS", str(key_file))
    with dt.open(path) as f:
        same(f.get_tensors(framework="numpy"), sample())
    # A malformed variable is warned about and ignored: no key, then.
    monkeypatch.setenv("DEATHTENSORS_KEYS", "not json")
    with pytest.warns(RuntimeWarning, match=r"DEATHTENSORS_KEYS \(JWK JSON, or a key file's path\)"):
        dt.open(path)
    monkeypatch.setenv("DEATHTENSORS_KEYS", "{not json")
    with pytest.warns(RuntimeWarning, match="DEATHTENSORS_KEYS"):
        f = dt.open(path)
    with pytest.raises(dt.NoKeyError):
        f.get_tensors(framework="numpy")


def test_signatures_and_requirements(tmp_path, sym):
    publisher = dt.generate_key("ed25519", kid="publisher")
    auditor = dt.generate_key("ed25519", kid="auditor")
    path = tmp_path / "m.dt"
    dt.save(path, sample(), sign=publisher)
    with dt.open(path, trusted_signers=dt.public_key(publisher)) as f:
        assert f.signers() == [dt.fingerprint(publisher)]
        same(f.get_tensors(framework="numpy"), sample())
        assert f.verify() is True
    with pytest.raises(dt.SignatureError, match="not trusted"):
        dt.open(path, trusted_signers=dt.public_key(auditor))
    with pytest.raises(dt.NotEncryptedError):
        dt.open(path, require_encryption=True)
    dt.sign_file(path, auditor)
    with dt.open(path, trusted_signers=[dt.public_key(auditor)]) as f:
        assert f.signers() == [dt.fingerprint(publisher), dt.fingerprint(auditor)]
    unsigned = tmp_path / "u.dt"
    dt.save(unsigned, sample())
    with pytest.raises(dt.SignatureError, match="not signed"):
        dt.open(unsigned, require_signature=True)
    with pytest.raises(dt.DeathTensorsError, match="digests"):
        dt.sign_file(unsigned, publisher)
    # Encrypted and signed: both requirements hold.
    both = tmp_path / "both.dt"
    dt.save(both, sample(), encrypt=sym, sign=publisher)
    with dt.open(both, keys=sym, trusted_signers=publisher, require_encryption=True) as f:
        same(f.get_tensors(framework="numpy"), sample())


def test_tampered_data_is_never_returned(tmp_path, sym):
    publisher = dt.generate_key("ed25519")
    path = tmp_path / "m.dt"
    dt.save(path, sample(), encrypt=sym, sign=publisher, checksum=True)
    raw = bytearray(path.read_bytes())
    with dt.open(path, keys=sym) as f:
        data_len = max(f.info(k)["data_offsets"][1] for k in f.keys())
        big_start = f.info("big")["data_offsets"][0]
    body_end = len(raw) - 32 - (96 + 16)  # before the footer and one signature
    blob_start = body_end - data_len
    raw[blob_start + big_start + 70_000] ^= 1  # inside the first 1 MiB chunk of 'big'
    bad = tmp_path / "bad.dt"
    bad.write_bytes(bytes(raw))
    with dt.open(bad, keys=sym) as f:
        # Signed: the ciphertext's signed digest fails before it is decrypted.
        with pytest.raises(dt.IntegrityError, match='"big"'):
            f.get_tensor("big", framework="numpy")
        np.testing.assert_array_equal(f.get_tensor("small", framework="numpy"), sample()["small"])
        # All at once: the chunk's tag or the digest, whichever is checked first.
        with pytest.raises((dt.IntegrityError, dt.DecryptionError), match='"big"'):
            f.get_tensors(framework="numpy")
        with pytest.raises(dt.IntegrityError):
            f.verify()
    # Unsigned: the chunk's tag fails.
    plain = tmp_path / "unsigned.dt"
    dt.save(plain, sample(), encrypt=sym)
    raw = bytearray(plain.read_bytes())
    with dt.open(plain, keys=sym) as f:
        big = f.info("big")["data_offsets"][0]
    raw[len(raw) - data_len + big + 70_000] ^= 1
    plain.write_bytes(bytes(raw))
    with dt.open(plain, keys=sym) as f:
        with pytest.raises(dt.DecryptionError, match='"big" chunk 0'):
            f.get_tensor("big", framework="numpy")
        with pytest.raises(dt.DecryptionError):
            f.get_tensors(framework="numpy")
    # Flipping a byte of the signature.
    raw = bytearray(path.read_bytes())
    raw[-20] ^= 1
    bad.write_bytes(bytes(raw))
    with pytest.raises(dt.SignatureError):
        dt.open(bad, keys=sym)


def test_a_signed_file_is_checked_without_requirements(tmp_path):
    # Every tensor returned from a signed file has been checked against its
    # signed digest, whether or not the reader asked for a signature.
    publisher = dt.generate_key("ed25519")
    path = tmp_path / "m.dt"
    dt.save(path, sample(), sign=publisher)
    raw = bytearray(path.read_bytes())
    with dt.open(path) as f:
        data_len = max(f.info(k)["data_offsets"][1] for k in f.keys())
        big_start = f.info("big")["data_offsets"][0]
    blob_start = len(raw) - 32 - (96 + 16) - data_len  # before the footer and one signature
    raw[blob_start + big_start + 1000] ^= 1
    bad = tmp_path / "bad.dt"
    bad.write_bytes(bytes(raw))
    with dt.open(bad) as f:
        assert f.signers() == [dt.fingerprint(publisher)]
        np.testing.assert_array_equal(f.get_tensor("small", framework="numpy"), sample()["small"])
        for read in (
            lambda: f.get_tensor("big", framework="numpy"),
            lambda: f.get_tensors(framework="numpy"),
            lambda: f.get_tensor_slice("big", 0, 2, framework="numpy"),
        ):
            with pytest.raises(dt.IntegrityError, match="big"):
                read()
        with pytest.raises(dt.DeathTensorsError, match="not mapped"):
            f.get_tensor_view("big", framework="numpy")
    from deathtensors.safetensors import SafetensorError, safe_open

    with safe_open(bad, "np") as f:
        with pytest.raises(SafetensorError, match="big"):
            f.get_tensor("big")
        with pytest.raises(SafetensorError, match="big"):
            f.get_slice("big")[0:1]
        np.testing.assert_array_equal(f.get_slice("small")[2:5], sample()["small"][2:5])


@pytest.mark.parametrize("backend", ["mmap", "pread"])
@pytest.mark.parametrize("kind", ["encrypted", "sealed", "compressed", "signed"])
def test_dropin_slices_of_files_that_are_not_mapped(tmp_path, sym, kind, backend):
    # The drop-in's get_slice reads (and decrypts, decompresses or checks)
    # where the bytes cannot be viewed in a mapping: transformers slices
    # every tensor it loads.
    torch = pytest.importorskip("torch")
    from deathtensors.safetensors import safe_open

    path = tmp_path / "m.dt"
    options = {
        "encrypted": {"encrypt": sym},
        "sealed": {"encrypt": sym, "seal_header": True},
        "compressed": {"compress": True},
        "signed": {"sign": dt.generate_key("ed25519")},
    }[kind]
    dt.save(path, sample(), **options)
    dt.register_keys([sym])
    try:
        for framework in ("np", "pt"):
            with safe_open(path, framework, backend=backend) as f:
                for name, want in sample().items():
                    if want.ndim == 0 or want.shape[0] == 0:
                        continue
                    got = f.get_slice(name)[0:2]
                    got = got.numpy() if framework == "pt" else got
                    assert got.tobytes() == want[0:2].tobytes(), (framework, name)
                    assert isinstance(f.get_slice(name)[:], torch.Tensor if framework == "pt" else np.ndarray)
    finally:
        dt.register_keys()


def test_trusted_signers_that_name_nobody_are_an_error_and_keys_stay_secret(tmp_path, sym):
    import copy
    import pickle

    path = tmp_path / "m.dt"
    dt.save(path, sample())
    for nobody in ([], (), dt.KeyRing(), sym, [sym], dt.generate_key("x25519", kid="x")):
        with pytest.raises(dt.DeathTensorsError) as e:
            dt.open(path, trusted_signers=nobody)
        assert sym["k"] not in str(e.value)  # the key is named, never shown
    with pytest.raises(dt.DeathTensorsError) as e:
        dt.fingerprint(sym)
    assert sym["k"] not in str(e.value) and "kid='team'" in str(e.value)
    secret = dt.Passphrase("correct horse")
    with pytest.raises(TypeError):
        pickle.dumps(secret)
    assert copy.deepcopy(secret) is secret
    with pytest.raises(TypeError):
        dt.Passphrase(b"bytes")
    with pytest.raises(TypeError):
        dt.open(path, keys=42)
    # Any iterable of keys: a generator, a set of paths.
    enc = tmp_path / "e.dt"
    dt.save(enc, sample(), encrypt=sym)
    with dt.open(enc, keys=(k for k in [sym])) as f:
        same(f.get_tensors(framework="numpy"), sample())


def test_sealed_files_without_their_key_are_not_taken_for_empty_ones(tmp_path, sym):
    a, b = tmp_path / "a.dt", tmp_path / "b.dt"
    dt.save(a, sample(), encrypt=sym, seal_header=True)
    dt.save(b, {"other": np.zeros(3)}, encrypt=sym, seal_header=True)
    with dt.open(a) as f:
        for call in (f.verify, f.get_all_bytes, f.all_stats):
            with pytest.raises(dt.NoKeyError):
                call()
    with pytest.raises(dt.NoKeyError):
        dt.diff(a, b)
    with dt.open(a, keys=sym) as f:
        assert f.verify() is True and set(f.get_all_bytes()) == set(sample())


def test_a_sealed_file_without_its_key_gets_one_verdict_from_python_and_the_cli(tmp_path, sym):
    # A footer that matches, and tags that cannot be checked without the
    # key: not "ok" for either front end (io's VerifyReport decides).
    path = tmp_path / "sealed.dt"
    dt.save(path, sample(), encrypt=sym, seal_header=True, checksum=True)
    with dt.open(path) as f:
        with pytest.raises(dt.NoKeyError):
            f.verify()
    r = subprocess.run([sys.executable, "-m", "deathtensors", "verify", str(path)], capture_output=True, text=True)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "no key given opens it" in r.stderr and "tags were not checked" in r.stderr
    r = subprocess.run([sys.executable, "-m", "deathtensors", "verify", "--json", str(path)], capture_output=True, text=True)
    assert r.returncode == 1 and json.loads(r.stdout)["ok"] is False
    # With the key, both say ok.
    key = tmp_path / "team.jwk"
    key.write_text(sym if isinstance(sym, str) else json.dumps(sym))
    with dt.open(path, keys=sym) as f:
        assert f.verify() is True
    r = subprocess.run([sys.executable, "-m", "deathtensors", "verify", "--key", str(key), str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_sharded_verify_applies_keys_and_requirements(tmp_path, sym):
    publisher = dt.generate_key("ed25519")
    t = sample()
    dt.save_sharded(tmp_path / "model", t, max_shard_bytes=600_000, encrypt=sym, sign=publisher, seal_header=True)
    index = tmp_path / "model.deathtensors.index.json"
    # Sealed shards open with their key.
    with dt.open_sharded(index, keys=sym, trusted_signers=publisher, verify=True) as f:
        same(f.get_tensors(framework="numpy"), t)
        same({k: f.get_tensor(k, framework="numpy") for k in f.keys()}, t)
        assert f.which_shard("small").endswith(".deathtensors")
    with pytest.raises(dt.SignatureError, match="not trusted"):
        dt.open_sharded(index, keys=sym, trusted_signers=dt.generate_key("ed25519"), verify=True)
    with pytest.raises(dt.NoKeyError):
        dt.open_sharded(index, verify=True)
    # A shard swapped for an unsigned one fails verify() under the requirement.
    plain = tmp_path / "plain"
    dt.save_sharded(plain, t, max_shard_bytes=600_000)
    with pytest.raises(dt.SignatureError, match="not signed"):
        dt.open_sharded(tmp_path / "plain.deathtensors.index.json", require_signature=True).verify()


def test_a_malformed_key_variable_does_not_stop_plain_files(tmp_path, monkeypatch):
    path = tmp_path / "m.dt"
    dt.save(path, sample())
    monkeypatch.setenv("DEATHTENSORS_KEYS", "{not json")
    with pytest.warns(RuntimeWarning, match="DEATHTENSORS_KEYS"):
        with dt.open(path) as f:
            same(f.get_tensors(framework="numpy"), sample())


def test_bad_arguments(tmp_path, sym):
    path = tmp_path / "m.dt"
    with pytest.raises(dt.DeathTensorsError):
        dt.save(path, sample(), encrypt=dt.generate_key("ed25519"))  # a signing key is no recipient
    # A signing key among the recipients is an error, not dropped.
    with pytest.raises(dt.DeathTensorsError, match="cannot be a recipient"):
        dt.save(path, sample(), encrypt=[sym, dt.public_key(dt.generate_key("ed25519", kid="pub"))])
    with pytest.raises(dt.DeathTensorsError, match="cipher"):
        dt.save(path, sample(), encrypt=sym, cipher="ROT13")
    with pytest.raises(dt.DeathTensorsError, match="chunk_size must be a power of two from 4096"):
        dt.save(path, sample(), encrypt=sym, chunk_size=1000)
    with pytest.raises(dt.DeathTensorsError):
        dt.save(path, sample(), sign=sym)  # a symmetric key cannot sign
    with pytest.raises(dt.DeathTensorsError):
        dt.open(path, keys=12)
    assert not os.path.exists(path)
    with pytest.raises(ValueError):
        dt.generate_key("rsa")


def test_sharded_checkpoints_encrypt_and_sign_every_shard(tmp_path, sym):
    publisher = dt.generate_key("ed25519")
    t = sample()
    shards = dt.save_sharded(tmp_path / "model", t, max_shard_bytes=600_000, encrypt=sym, sign=publisher)
    assert len(shards) >= 2
    for s in shards:
        with dt.open(s, keys=sym, trusted_signers=publisher) as f:
            assert f.is_encrypted() and f.signers() == [dt.fingerprint(publisher)]
    index = tmp_path / "model.deathtensors.index.json"
    with dt.open_sharded(index, keys=sym, trusted_signers=publisher) as f:
        same(f.get_tensors(framework="numpy"), t)
        same({k: f.get_tensor(k, framework="numpy") for k in f.keys()}, t)
    with dt.open_sharded(index) as f:
        with pytest.raises(dt.NoKeyError):
            f.get_tensor("small", framework="numpy")
    with dt.open_sharded(index, keys=sym, trusted_signers=dt.generate_key("ed25519")) as f:
        with pytest.raises(dt.SignatureError):
            f.get_tensor("small", framework="numpy")


def test_sealed_header_hides_names_shapes_and_metadata(tmp_path, sym):
    path = tmp_path / "sealed.dt"
    dt.save(path, sample(), global_metadata={"arch": "secret-moe"}, encrypt=sym, seal_header=True)
    raw = path.read_bytes()
    assert b"secret-moe" not in raw and b"scalar" not in raw
    with dt.open(path) as f:
        assert f.is_sealed() and f.keys() == [] and f.metadata() == {}
        assert f.encryption()["recipients"] == [{"kind": "symmetric", "kid": "team"}]
    with dt.open(path, keys=sym) as f:
        assert f.is_sealed() and sorted(f.keys()) == sorted(sample())
        assert f.metadata() == {"arch": "secret-moe"}
        same(f.get_tensors(framework="numpy"), sample())
    with pytest.raises(dt.DeathTensorsError, match="encrypt"):
        dt.save(tmp_path / "x.dt", sample(), seal_header=True)


from hypothesis import given, settings, strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

DTYPES = [np.bool_, np.uint8, np.int8, np.uint16, np.int16, np.float16, np.int32, np.uint32,
          np.float32, np.int64, np.uint64, np.float64, np.complex64, np.complex128]
arrays = hnp.arrays(dtype=st.sampled_from(DTYPES), shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=40))
names = st.text(st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=12)
KEY = dt.generate_key("symmetric", kid="k")


@settings(max_examples=40, deadline=None)
@given(tensors=st.dictionaries(names, arrays, max_size=5), cipher=st.sampled_from(["AES-256-GCM", "CHACHA20-POLY1305"]),
       seal=st.booleans(), checksum=st.booleans())
def test_encrypted_round_trips(tmp_path_factory, tensors, cipher, seal, checksum):
    path = tmp_path_factory.mktemp("prop") / "m.dt"
    dt.save(path, tensors, encrypt=KEY, cipher=cipher, chunk_size=4096, seal_header=seal, checksum=checksum)
    with dt.open(path, keys=KEY) as f:
        got = f.get_tensors(framework="numpy")
    assert set(got) == set(tensors)
    for k, v in tensors.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape and got[k].tobytes() == np.ascontiguousarray(v).tobytes(), k


def test_bytes_api_refuses_ciphertext_and_checks_like_files(tmp_path, sym):
    """`safetensors.load(bytes)` and `deserialize` open the bytes with the
    same reader as files: an encrypted or sealed file is refused (its bytes
    are ciphertext, never tensors), and a signed one is read past its block."""
    import deathtensors.safetensors as dts
    import deathtensors.safetensors.numpy as dtn

    publisher = dt.generate_key("ed25519")
    for name, options in [("enc.dt", {"encrypt": sym}), ("sealed.dt", {"encrypt": sym, "seal_header": True})]:
        path = tmp_path / name
        dt.save(path, sample(), **options)
        for call in (dtn.load, dts.deserialize):
            with pytest.raises(dts.SafetensorError, match="encrypted"):
                call(path.read_bytes())
    signed = tmp_path / "signed.dt"
    dt.save(signed, sample(), checksum=True, sign=publisher)
    same(dtn.load(signed.read_bytes()), sample())
    # Flag bit 3 without the block it promises: refused, as from a file.
    data = bytearray(signed.read_bytes())
    block = 16 + 96
    with pytest.raises(dts.SafetensorError):
        dtn.load(bytes(data[:-block]))
    data[-1] ^= 1  # a damaged trailer
    with pytest.raises(dts.SafetensorError):
        dtn.load(bytes(data))


def test_a_policy_that_would_crash_the_reader_refuses_access(tmp_path, sym):
    bombs = [
        "package model\nimport rego.v1\nallow if { count([x | some x in numbers.range(1, 100000000)]) > 0 }\n",
        "package model\nimport rego.v1\nf(x) := f(x + 1)\nallow if f(1) > 0\n",
    ]
    for i, rego in enumerate(bombs):
        path = tmp_path / f"bomb{i}.dt"
        dt.save(path, sample(), encrypt=sym, global_metadata={"__policy__": rego})
        with pytest.raises(dt.DeathTensorsError, match="cannot be evaluated"):
            dt.open(path, keys=sym)


def test_loading_all_of_a_sealed_file_without_its_key_is_an_error(tmp_path, sym):
    """Without a key a sealed file lists no tensors (its header is
    encrypted); loading all of it must say so, not return an empty dict
    that passes for a file of no tensors (a truncated one included)."""
    import deathtensors.safetensors.numpy as dtn

    path = tmp_path / "sealed.dt"
    dt.save(path, sample(), encrypt=sym, seal_header=True)
    with dt.open(path) as f:
        assert f.keys() == []
        with pytest.raises(dt.NoKeyError, match="sealed"):
            f.get_tensors(framework="numpy")
    with pytest.raises(dt.NoKeyError, match="sealed"):
        dtn.load_file(path)
    with dt.open(path, keys=sym) as f:
        same(f.get_tensors(framework="numpy"), sample())
    empty = tmp_path / "empty.dt"
    dt.save(empty, {})
    assert dt.open(empty).get_tensors() == {}


def test_verify_never_claims_checks_it_could_not_make(tmp_path, sym):
    """An encrypted file opened without its key: verify() raised nothing and
    returned True, though no tag or digest could be checked (issue 61). It
    now raises NoKeyError saying so; with the key it checks everything."""
    path = tmp_path / "m.dt"
    dt.save(path, sample(), encrypt=sym, checksum=True)
    with dt.open(path) as f:
        with pytest.raises(dt.NoKeyError, match="cannot verify .*encrypted and no key given matches its recipients"):
            f.verify()
    with dt.open(path, keys=[sym]) as f:
        assert f.verify() is True


@pytest.mark.parametrize("sealed", [False, True], ids=["encrypted", "sealed"])
def test_the_command_line_and_python_come_to_one_verdict_without_a_key(tmp_path, sym, sealed):
    """Issue 59: on a sealed file with a footer and no key the CLI said
    `ok: SHA-256 footer` and exited 0 while Python refused. Both now refuse
    (io's VerifyReport decides): neither says "ok" for tags it could not
    check; with the key both pass."""
    import subprocess
    import sys

    path = tmp_path / "m.dt"
    dt.save(path, sample(), encrypt=sym, checksum=True, seal_header=sealed)
    with pytest.raises(dt.NoKeyError):
        with dt.open(path) as f:
            f.verify()
    cli = lambda *a: subprocess.run([sys.executable, "-m", "deathtensors", "verify", str(path), *a],  # noqa: E731
                                    capture_output=True, text=True)
    r = cli()
    assert r.returncode != 0 and "ok:" not in r.stdout, r.stdout + r.stderr
    assert "no key given" in r.stderr, r.stderr
    key = tmp_path / "team.jwk"
    key.write_text(__import__("json").dumps(sym))
    r = cli("--key", str(key))
    assert r.returncode == 0 and "every encrypted chunk's tag" in r.stdout, r.stdout + r.stderr
    with dt.open(path, keys=[sym]) as f:
        assert f.verify() is True


def test_a_policy_child_that_dies_prints_no_fatal_error_trace(tmp_path):
    """The policy that crashes its child (the test above) prints nothing
    into the log: the child's crash is the parent's to report, as an error
    (issue 61: pytest's log held "Fatal Python error: Aborted" and
    "Segmentation fault" traces from the child, with faulthandler on)."""
    import subprocess

    here = os.path.dirname(os.path.abspath(__file__))
    r = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-m", "pytest", "-q", "-p", "no:cacheprovider",
         os.path.join(here, "test_crypto.py"), "-k", "test_a_policy_that_would_crash_the_reader_refuses_access"],
        capture_output=True, text=True, timeout=300, cwd=here,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Fatal Python error" not in r.stdout + r.stderr, r.stdout + r.stderr
    assert "1 passed" in r.stdout, r.stdout
