"""Interop with the real cryptotensors 0.2.3 (its PyPI wheel, in a separate
venv this test creates): files it writes (v1 and chunked v2, its three
ciphers, policies, partly encrypted) read here with its JWK keys as they
are, files written here open in it, and conversions both ways keep every
value."""

import base64
import json
import os
import pathlib
import numpy as np
import pytest

import deathtensors as dt
from conftest import peer_runner
from deathtensors import cryptotensors as ct

ROOT = pathlib.Path(__file__).resolve().parents[3]
CT_VENV = pathlib.Path(os.environ.get("DT_CRYPTOTENSORS_VENV", ROOT / ".venv-ct023"))


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def keys(alg="aes256gcm"):
    """cryptotensors' JWK dialect: standard base64, lowercase kty, alg."""
    from hashlib import sha256

    n = 16 if alg == "aes128gcm" else 32
    enc = {"kty": "oct", "alg": alg, "kid": f"enc-{alg}", "k": b64(sha256(alg.encode()).digest()[:n])}
    jwk = dt.generate_key("ed25519")
    pad = lambda s: s + "=" * (-len(s) % 4)  # noqa: E731
    d = base64.urlsafe_b64decode(pad(jwk["d"]))
    x = base64.urlsafe_b64decode(pad(jwk["x"]))
    sign = {"kty": "okp", "alg": "ed25519", "kid": "sign", "x": b64(x), "d": b64(d)}
    return enc, sign


def tensors():
    rng = np.random.default_rng(3)
    return {
        "w": rng.standard_normal((70, 100)).astype(np.float32),  # 28000 B: 7 chunks of 4 KiB
        "b": np.arange(7, dtype=np.int64),
        "h": rng.standard_normal(5).astype(np.float16),
        "m": np.array([[True, False], [False, True]]),
        "empty": np.zeros((0, 3), dtype=np.float32),
    }


WRITE = r"""
import json, sys
import numpy as np
from cryptotensors.numpy import save_file
spec = json.loads(sys.argv[1])
t = {k: np.frombuffer(bytes.fromhex(v["hex"]), dtype=v["dtype"]).reshape(v["shape"]) for k, v in spec["tensors"].items()}
save_file(t, spec["path"], metadata=spec.get("metadata"), config=spec["config"])
"""

READ = r"""
import hashlib, json, sys
from cryptotensors import register_direct_key_provider, safe_open
register_direct_key_provider(keys=json.loads(sys.argv[2]))
out = {}
with safe_open(sys.argv[1], framework="np") as f:
    for k in f.keys():
        out[k] = f.get_tensor(k).tobytes().hex()
print(json.dumps(out))
"""


@pytest.fixture(scope="session")
def crypto():
    """A runner for scripts under cryptotensors 0.2.3."""
    return peer_runner(CT_VENV, "cryptotensors==0.2.3", "cryptotensors 0.2.3")


def spec(path, config, metadata=None):
    return json.dumps({
        "path": str(path),
        "config": config,
        "metadata": metadata,
        "tensors": {k: {"hex": v.tobytes().hex(), "dtype": v.dtype.str, "shape": list(v.shape)} for k, v in tensors().items()},
    })


def same(got):
    want = tensors()
    assert set(got) == set(want)
    for k, v in want.items():
        g = np.asarray(got[k])
        assert g.dtype == v.dtype and g.shape == v.shape and g.tobytes() == v.tobytes(), k


CASES = [(alg, version) for alg in ("aes128gcm", "aes256gcm", "chacha20poly1305") for version in ("1", "2")]


@pytest.mark.parametrize("alg,version", CASES)
def test_read_files_cryptotensors_writes(tmp_path, crypto, alg, version):
    enc, sign = keys(alg)
    path = tmp_path / "ct.safetensors"
    crypto(WRITE, spec(path, {"enc_key": enc, "sign_key": sign, "version": version, "chunk_size": 4096}, {"format": "np"}))
    with dt.open(path, keys=[enc, sign]) as f:
        assert f.is_encrypted()
        assert f.metadata() == {"format": "np"}  # the crypto fields describe the file, not the model
        same(f.get_tensors(framework="numpy"))
        assert f.signers() == [dt.fingerprint(sign)]
    # The signature is checked with the caller's trusted signer, too.
    with dt.open(path, keys=[enc, sign], trusted_signers=sign) as f:
        same({k: f.get_tensor(k, framework="numpy") for k in f.keys()})
    other = dict(sign, x=b64(os.urandom(32)))
    other.pop("d")
    with pytest.raises(dt.SignatureError):
        dt.open(path, keys=[enc, other])
    # cryptotensors' own API, as a drop-in, and the safetensors drop-in with registered keys.
    same(ct.load_file(path, keys=[enc, sign]))
    ct.register_direct_key_provider(keys=[enc, sign])
    try:
        same(ct.load_file(path))
        from deathtensors.safetensors.numpy import load_file

        same(load_file(path))
        with ct.safe_open(path, framework="np") as f:
            assert f.metadata() == {"format": "np"}
    finally:
        dt.register_keys()


@pytest.mark.parametrize("alg,version", CASES)
def test_cryptotensors_reads_files_written_here(tmp_path, crypto, alg, version):
    enc, sign = keys(alg)
    path = tmp_path / "ours.safetensors"
    ct.save_file(tensors(), path, metadata={"format": "np"}, config={"enc_key": enc, "sign_key": sign, "version": version, "chunk_size": 4096})
    got = json.loads(crypto(READ, path, json.dumps([enc, sign])))
    same({k: np.frombuffer(bytes.fromhex(v), dtype=tensors()[k].dtype).reshape(tensors()[k].shape) for k, v in got.items()})
    same(ct.load_file(path, keys=[enc, sign]))


def test_partial_encryption_and_policies(tmp_path, crypto):
    enc, sign = keys()
    path = tmp_path / "p.safetensors"
    policy = {"local": 'package model\nimport rego.v1\ndefault allow := false\nallow if input.user == "alice"\n',
              "remote": "package model\nallow = true"}
    ct.save_file(tensors(), path, config={"enc_key": enc, "sign_key": sign, "tensors": ["w", "b"], "policy": policy})
    with dt.open(path, keys=[enc, sign], policy_input={"user": "alice"}) as f:
        same(f.get_tensors(framework="numpy"))
    with pytest.raises(dt.PolicyDeniedError, match="policy"):
        dt.open(path, keys=[enc, sign], policy_input={"user": "bob"})
    # Plaintext tensors of a partly encrypted file: nothing authenticates them.
    with dt.open(path, keys=[enc, sign], policy_input={"user": "alice"}, require_signature=True) as f:
        f.get_tensor("w", framework="numpy")
        with pytest.raises(dt.DeathTensorsError, match="authenticates"):
            f.get_tensor("h", framework="numpy")


def test_convert_both_ways(tmp_path, crypto):
    enc, sign = keys("chacha20poly1305")
    src = tmp_path / "ct.safetensors"
    crypto(WRITE, spec(src, {"enc_key": enc, "sign_key": sign}))
    # cryptotensors -> deathtensors, encrypted for a new recipient and signed.
    team = dt.generate_key("symmetric", kid="team")
    publisher = dt.generate_key("ed25519")
    with dt.open(src, keys=[enc, sign]) as f:
        plain = f.get_tensors(framework="numpy")
    ours = tmp_path / "ours.dt"
    dt.save(ours, plain, encrypt=team, sign=publisher)
    with dt.open(ours, keys=team, trusted_signers=publisher) as f:
        same(f.get_tensors(framework="numpy"))
    # ... and back, for cryptotensors' users.
    back = tmp_path / "back.safetensors"
    with dt.open(ours, keys=team) as f:
        ct.save_file(f.get_tensors(framework="numpy"), back, config={"enc_key": enc, "sign_key": sign})
    got = json.loads(crypto(READ, back, json.dumps([enc, sign])))
    assert set(got) == set(tensors())


def test_what_a_cryptotensors_file_says_without_a_key():
    # Files the real wheel wrote (testdata/cryptotensors): their encryption,
    # signer and policy are described with no key, and a trusted public key
    # alone checks the signature (cryptotensors names its signer by key id).
    base = ROOT / "testdata" / "cryptotensors"
    jwks = json.loads((base / "keys.json").read_text())["keys"]
    sign = next(k for k in jwks if k["kty"].lower() == "okp")
    public = {k: v for k, v in sign.items() if k != "d"}
    path = base / "v2_aes256gcm.safetensors"
    with dt.open(path) as f:
        info = f.encryption()
        assert info["format"] == "cryptotensors" and info["cipher"] == "AES-256-GCM"
        assert info["recipients"] == [{"kind": "symmetric", "kid": "enc-aes256gcm"}]
        assert info["signer_kid"] == "sign-ed25519" and info["encrypted_tensors"] == len(f.keys())
        assert "package model" in f.policy()
        assert f.signers() == []
    with dt.open(path, trusted_signers=public) as f:
        assert f.signers() == [dt.fingerprint(public)]
        with pytest.raises(dt.NoKeyError):
            f.get_tensor(f.keys()[0], framework="numpy")
    with pytest.raises(dt.SignatureError, match="sign-ed25519"):
        dt.open(path, trusted_signers=dt.public_key(dt.generate_key("ed25519")))
    with pytest.raises(dt.SignatureError, match="public key"):
        dt.open(path, require_signature=True)
    with dt.open(path, keys=jwks, trusted_signers=public) as f:
        assert f.signers() == [dt.fingerprint(public)] and f.verify() is True


READ_NUMPY = r"""
import json, sys
from cryptotensors.numpy import load_file, load
from cryptotensors import register_direct_key_provider
register_direct_key_provider(keys=json.loads(sys.argv[2]))
a = load_file(sys.argv[1])
b = load(open(sys.argv[1], "rb").read())
assert all((a[k] == b[k]).all() for k in a)
print(json.dumps({k: v.tobytes().hex() for k, v in a.items()}))
"""

WRITE_NUMPY = r"""
import json, sys
import numpy as np
from cryptotensors.numpy import save_file
t = {"w": (np.arange(7000, dtype=np.float32) / 7).reshape(70, 100), "b": np.arange(7)}
save_file(t, sys.argv[1], metadata={"m": "v"}, config=json.loads(sys.argv[2]))
"""


def test_cryptotensors_api_modules_both_ways(tmp_path, crypto):
    # deathtensors.cryptotensors.torch / .numpy, safe_open(config=...) and
    # the config classes, against the real cryptotensors (its numpy module:
    # its venv has no torch).
    torch = pytest.importorskip("torch")
    from deathtensors.cryptotensors import DeserializeCryptoConfig, SerializeCryptoConfig, SafetensorError
    from deathtensors.cryptotensors import numpy as ctn
    from deathtensors.cryptotensors import torch as ctt

    enc, sign = keys()
    t = {"w": torch.arange(7000, dtype=torch.float32).reshape(70, 100) / 7, "b": torch.arange(7)}
    # Theirs, read with ours.
    theirs = tmp_path / "theirs.safetensors"
    crypto(WRITE_NUMPY, theirs, json.dumps({"enc_key": enc, "sign_key": sign}))
    got = ctt.load_file(theirs, config={"enc_key": enc, "sign_key": sign})
    assert all(torch.equal(got[k], t[k]) for k in t)
    with ct.safe_open(theirs, "pt", config=DeserializeCryptoConfig(enc_key=enc, sign_key=sign)) as f:
        assert f.metadata() == {"m": "v"}
        assert set(f.reserved_metadata()) == {"__crypto_keys__", "__encryption__", "__policy__", "__signature__"}
        assert torch.equal(f.get_slice("w")[3:5, ::7], t["w"][3:5, ::7])
    with pytest.raises(SafetensorError):
        ct.safe_open(theirs, "pt", config={"enc_key": keys()[0], "sign_key": keys()[1]})  # another signer
    # Ours, read by theirs.
    ours = tmp_path / "ours.safetensors"
    ctt.save_file(t, ours, metadata={"m": "v"}, config=SerializeCryptoConfig(enc_key=enc, sign_key=sign, chunk_size=4096))
    got = json.loads(crypto(READ_NUMPY, ours, json.dumps([enc, sign])))
    for k, v in t.items():
        assert bytes.fromhex(got[k]) == v.numpy().tobytes(), k
    # Bytes, encrypted and plain.
    data = ctt.save(t, config={"enc_key": enc, "sign_key": sign})
    assert ct.is_encrypted_bytes(data)
    back = ctt.load(data, config={"enc_key": enc, "sign_key": sign})
    assert all(torch.equal(back[k], t[k]) for k in t)
    arrays = {"x": np.arange(12, dtype=np.float32).reshape(3, 4)}
    plain = ctn.save(arrays)
    assert not ct.is_encrypted_bytes(plain) and np.array_equal(ctn.load(plain)["x"], arrays["x"])
    sealed = ctn.save(arrays, config={"enc_key": enc, "sign_key": sign})
    assert np.array_equal(ctn.load(sealed, config={"enc_key": enc, "sign_key": sign})["x"], arrays["x"])
    # serialize_file takes safetensors' flattened form.
    flat = {"x": {"dtype": "float32", "shape": [3, 4], "data": arrays["x"].tobytes()}}
    path = tmp_path / "flat.safetensors"
    ct.serialize_file(flat, path, config={"enc_key": enc, "sign_key": sign})
    assert np.array_equal(ctn.load_file(path, config={"enc_key": enc, "sign_key": sign})["x"], arrays["x"])


def test_keys_without_a_kid_work_both_ways(tmp_path, crypto):
    # cryptotensors' JWKs may have no "kid": its files then name no master
    # key, and a key (its registry wants a kid) opens them, in both libraries.
    named, sign = keys()
    enc = {k: v for k, v in named.items() if k != "kid"}
    theirs = tmp_path / "theirs.safetensors"
    crypto(WRITE, spec(theirs, {"enc_key": enc, "sign_key": sign}))
    with dt.open(theirs, keys=[enc, sign]) as f:
        same(f.get_tensors(framework="numpy"))
        assert f.encryption()["recipients"] == [{"kind": "symmetric", "kid": None}]
    ours = tmp_path / "ours.safetensors"
    ct.save_file(tensors(), ours, config={"enc_key": enc, "sign_key": sign})
    assert ct.safe_open(ours, "np", config={"enc_key": enc, "sign_key": sign}).reserved_metadata()
    got = json.loads(crypto(READ, ours, json.dumps([named, sign])))
    same({k: np.frombuffer(bytes.fromhex(v), dtype=tensors()[k].dtype).reshape(tensors()[k].shape) for k, v in got.items()})
    same(ct.load_file(ours, keys=[named, sign]))
    # A key without a kid cannot be a recipient of a deathtensors file.
    with pytest.raises(dt.DeathTensorsError, match="without a key id"):
        dt.save(tmp_path / "x.dt", tensors(), encrypt=enc)


def test_keys_made_here_in_cryptotensors_dialect_work_there(tmp_path, crypto):
    enc = dt.generate_key("symmetric", kid="enc", format="cryptotensors")
    sign = dt.generate_key("ed25519", kid="sign", format="cryptotensors")
    assert enc["kty"] == "oct" and enc["alg"] == "aes256gcm" and sign["kty"] == "okp"
    public = dt.public_key(sign)
    assert "d" not in public and public["kty"] == "okp"
    with pytest.raises(dt.DeathTensorsError, match="X25519"):
        dt.generate_key("x25519", kid="x", format="cryptotensors")
    # Written there with them, read here; written here, read there.
    theirs = tmp_path / "theirs.safetensors"
    crypto(WRITE, spec(theirs, {"enc_key": enc, "sign_key": sign}))
    same(ct.load_file(theirs, keys=[enc, public]))
    ours = tmp_path / "ours.safetensors"
    ct.save_file(tensors(), ours, config={"enc_key": enc, "sign_key": sign})
    got = json.loads(crypto(READ, ours, json.dumps([enc, sign])))
    same({k: np.frombuffer(bytes.fromhex(v), dtype=tensors()[k].dtype).reshape(tensors()[k].shape) for k, v in got.items()})


def test_key_dialect_edges_and_hostile_bytes():
    # public_key keeps our dialect unless the key is cryptotensors' (Ed25519, kid).
    x = dt.generate_key("x25519", kid="x")
    lower = dict(x, kty="okp")
    assert dt.public_key(lower)["crv"] == "X25519"
    anonymous = {k: v for k, v in dt.generate_key("ed25519").items() if k != "kid"}
    assert "d" not in dt.public_key(dict(anonymous, kty="okp", alg="ed25519"))
    # cryptotensors' dialect needs a kid: a default one, as for symmetric keys.
    assert dt.generate_key("ed25519", format="cryptotensors")["kid"] == "key"
    # A header nested past Python's recursion limit is just not a cryptotensors file here.
    deep = b"[" * 100_000 + b"]" * 100_000
    assert ct.is_encrypted_bytes(len(deep).to_bytes(8, "little") + deep) is False
