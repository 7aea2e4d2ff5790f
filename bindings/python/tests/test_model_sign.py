"""OpenSSF model signing of directories: `dt.sign_model` / `dt.verify_model`
and the CLI's `sign-model` / `verify-model`, against the real `model-signing`
package (its CLI, `python -m model_signing`), both ways, key and certificate
modes, and the tamper list (docs/SECURITY.md, "Model directories")."""

import base64
import datetime
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import deathtensors as dt

pytest.importorskip("model_signing")
from cryptography import x509  # noqa: E402
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID  # noqa: E402
from safetensors.numpy import save_file as st_save  # noqa: E402


def model_signing(*args):
    """The real tool's CLI; its verdict is its exit code."""
    return subprocess.run([sys.executable, "-m", "model_signing", *map(str, args)], capture_output=True, text=True)


def cli(*args):
    return subprocess.run([sys.executable, "-m", "deathtensors", *map(str, args)], capture_output=True, text=True)


def make_model(root):
    """A sharded safetensors checkpoint, a deathtensors file, a JSON config,
    a nested folder, and a .git folder (always ignored)."""
    root.mkdir()
    rng = np.random.default_rng(0)
    st_save({"a": rng.standard_normal((64, 32)).astype(np.float32)}, str(root / "model-00001-of-00002.safetensors"))
    st_save({"b": rng.standard_normal((16,)).astype(np.float32)}, str(root / "model-00002-of-00002.safetensors"))
    index = {
        "metadata": {},
        "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"},
    }
    (root / "model.safetensors.index.json").write_text(json.dumps(index))
    dt.save(str(root / "head.dt"), {"head": np.arange(12, dtype=np.float32).reshape(3, 4)})
    (root / "config.json").write_text(json.dumps({"hidden": 32}))
    (root / "tokenizer").mkdir()
    (root / "tokenizer" / "vocab.txt").write_text("a\nb\n")
    (root / "tokenizer" / "deeper").mkdir()
    (root / "tokenizer" / "deeper" / "merges.txt").write_text("a b\n")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    return root


def write_key(path, key, sec1=False):
    fmt = serialization.PrivateFormat.TraditionalOpenSSL if sec1 else serialization.PrivateFormat.PKCS8
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, fmt, serialization.NoEncryption()))
    pub = path.with_name(path.stem + ".pub.pem")
    pub.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return path, pub


@pytest.fixture(params=["p256", "p384", "p256-sec1"])
def keys(request, tmp_path):
    curve = ec.SECP384R1() if request.param == "p384" else ec.SECP256R1()
    return write_key(tmp_path / "signer.pem", ec.generate_private_key(curve), sec1=request.param.endswith("sec1"))


@pytest.fixture
def model(tmp_path):
    return make_model(tmp_path / "my-model")


def _name(cn):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(subject_key, subject, issuer_key, issuer, *, ca, usage=True):
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(subject_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
        )
    elif usage:
        builder = builder.add_extension(
            x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True
        ).add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False)
    else:
        builder = builder.add_extension(
            x509.KeyUsage(False, False, True, False, False, False, False, False, False), critical=True
        )
    return builder.sign(issuer_key, hashes.SHA256())


@pytest.fixture
def pki(tmp_path):
    """A root CA, an intermediate, a leaf for code signing (P-256) and a
    leaf without signing usage; PEM files."""
    d = tmp_path / "pki"
    d.mkdir()
    root_key = ec.generate_private_key(ec.SECP384R1())
    root = _cert(root_key, "Test Root", root_key, "Test Root", ca=True)
    mid_key = ec.generate_private_key(ec.SECP256R1())
    mid = _cert(mid_key, "Test Intermediate", root_key, "Test Root", ca=True)
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    leaf = _cert(leaf_key, "Model Publisher", mid_key, "Test Intermediate", ca=False)
    bad_key = ec.generate_private_key(ec.SECP256R1())
    bad = _cert(bad_key, "Not A Signer", mid_key, "Test Intermediate", ca=False, usage=False)
    other_root_key = ec.generate_private_key(ec.SECP256R1())
    other_root = _cert(other_root_key, "Other Root", other_root_key, "Other Root", ca=True)
    files = {}
    for name, c in [("root", root), ("mid", mid), ("leaf", leaf), ("bad", bad), ("other_root", other_root)]:
        files[name] = d / f"{name}.crt"
        files[name].write_bytes(c.public_bytes(serialization.Encoding.PEM))
    files["leaf_key"], _ = write_key(d / "leaf.pem", leaf_key)
    files["bad_key"], _ = write_key(d / "bad.pem", bad_key)
    return files


# -- key mode, both ways ------------------------------------------------------


def test_signed_by_us_verifies_with_model_signing(model, keys):
    key, pub = keys
    signed = dt.sign_model(model, key)
    assert (model / "model.sig").exists()
    assert sorted(signed["files"]) == [
        "config.json",
        "head.dt",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
        "tokenizer/deeper/merges.txt",
        "tokenizer/vocab.txt",
    ]
    assert "model.sig" in signed["ignore_paths"] and ".git" in signed["ignore_paths"]
    r = model_signing("verify", "key", model, "--public_key", pub, "--signature", model / "model.sig")
    assert r.returncode == 0, r.stdout + r.stderr
    assert dt.verify_model(model, pub)["files"] == signed["files"]


def test_signed_by_model_signing_verifies_with_us(model, keys, tmp_path):
    key, pub = keys
    sig = model / "model.sig"
    r = model_signing("sign", "key", model, "--private_key", key, "--signature", sig)
    assert r.returncode == 0, r.stdout + r.stderr
    verified = dt.verify_model(model, pub, sig)
    assert verified["name"] == "my-model"
    assert "tokenizer/deeper/merges.txt" in verified["files"]
    # A bundle outside the directory, too.
    outside = tmp_path / "elsewhere.sig"
    assert model_signing("sign", "key", model, "--private_key", key, "--signature", outside).returncode == 0
    dt.verify_model(model, pub, outside)


def test_our_statement_matches_model_signing_s(model, keys, tmp_path):
    """Same files, same digests, same subject digest and resource order."""
    key, pub = keys
    ours, theirs = tmp_path / "ours.sig", tmp_path / "theirs.sig"
    dt.sign_model(model, key, ours)
    assert model_signing("sign", "key", model, "--private_key", key, "--signature", theirs).returncode == 0

    def statement(path):
        bundle = json.loads(path.read_text())
        assert bundle["mediaType"] == "application/vnd.dev.sigstore.bundle.v0.3+json"
        assert bundle["dsseEnvelope"]["payloadType"] == "application/vnd.in-toto+json"
        return bundle, json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))

    (ob, o), (tb, t) = statement(ours), statement(theirs)
    assert ob["verificationMaterial"] == tb["verificationMaterial"]
    assert o["_type"] == t["_type"] and o["predicateType"] == t["predicateType"]
    assert o["subject"] == t["subject"]
    assert o["predicate"]["resources"] == t["predicate"]["resources"]
    for k in ("method", "hash_type", "allow_symlinks"):
        assert o["predicate"]["serialization"][k] == t["predicate"]["serialization"][k]
    assert set(o["predicate"]["serialization"]["ignore_paths"]) == set(t["predicate"]["serialization"]["ignore_paths"])


# -- certificate mode, both ways ---------------------------------------------


def test_certificate_mode_both_ways(model, pki, tmp_path):
    ours, theirs = tmp_path / "ours.sig", tmp_path / "theirs.sig"
    dt.sign_model(model, pki["leaf_key"], ours, certificate_chain=[pki["leaf"], pki["mid"]])
    r = model_signing(
        "verify", "certificate", model, "--signature", ours, "--certificate_chain", pki["root"],
        "--certificate_chain", pki["mid"],
    )
    assert r.returncode == 0, r.stdout + r.stderr
    dt.verify_model(model, signature=ours, certificate_chain=[pki["root"]])

    r = model_signing(
        "sign", "certificate", model, "--signature", theirs, "--private_key", pki["leaf_key"],
        "--signing_certificate", pki["leaf"], "--certificate_chain", pki["mid"],
    )
    assert r.returncode == 0, r.stdout + r.stderr
    dt.verify_model(model, signature=theirs, certificate_chain=[pki["root"]])


def test_certificate_mode_refusals(model, pki, tmp_path):
    sig = tmp_path / "c.sig"
    dt.sign_model(model, pki["leaf_key"], sig, certificate_chain=[pki["leaf"], pki["mid"]])
    # Another root: the chain leads nowhere trusted.
    with pytest.raises(dt.SignatureError, match="does not chain"):
        dt.verify_model(model, signature=sig, certificate_chain=[pki["other_root"]])
    r = model_signing("verify", "certificate", model, "--signature", sig, "--certificate_chain", pki["other_root"])
    assert r.returncode != 0
    # A public key cannot verify a certificate bundle.
    _, pub = write_key(tmp_path / "k.pem", ec.generate_private_key(ec.SECP256R1()))
    with pytest.raises(dt.SignatureError, match="certificate"):
        dt.verify_model(model, pub, sig)
    # A certificate without signing usage.
    bad = tmp_path / "bad.sig"
    dt.sign_model(model, pki["bad_key"], bad, certificate_chain=[pki["bad"], pki["mid"]])
    with pytest.raises(dt.SignatureError, match="cannot be used for signing"):
        dt.verify_model(model, signature=bad, certificate_chain=[pki["root"]])
    r = model_signing(
        "verify", "certificate", model, "--signature", bad, "--certificate_chain", pki["root"],
        "--certificate_chain", pki["mid"],
    )
    assert r.returncode != 0
    # A signing certificate that is not the key's.
    with pytest.raises(dt.DeathTensorsError, match="not for this private key"):
        dt.sign_model(model, pki["bad_key"], tmp_path / "x.sig", certificate_chain=[pki["leaf"], pki["mid"]])


# -- the tamper list, against ours and the real one ---------------------------


def _flip_b64(text, field):
    """The bundle with one character of a base64 field changed."""
    bundle = json.loads(text)
    env = bundle["dsseEnvelope"]
    if field == "sig":
        raw = bytearray(base64.b64decode(env["signatures"][0]["sig"]))
        raw[len(raw) // 2] ^= 1
        env["signatures"][0]["sig"] = base64.b64encode(bytes(raw)).decode()
    else:
        raw = bytearray(base64.b64decode(env["payload"]))
        at = bytes(raw).index(b'"name": "config.json"') + len('"name": "c')
        raw[at] ^= 0x20  # config.json -> cOnfig.json
        env["payload"] = base64.b64encode(bytes(raw)).decode()
    return json.dumps(bundle)


TAMPERS = {
    "changed": (dt.IntegrityError, "changed .*config.json"),
    "added": (dt.IntegrityError, "not in the signature: extra.bin"),
    "added-nested": (dt.IntegrityError, "not in the signature: tokenizer/deeper/extra.txt"),
    "removed": (dt.IntegrityError, "missing: tokenizer/vocab.txt"),
    "renamed": (dt.IntegrityError, "missing: head.dt; not in the signature: head2.dt"),
    "bundle-sig-byte": (dt.SignatureError, "does not verify"),
    "bundle-payload-byte": (dt.SignatureError, "does not verify"),
    "wrong-key": (dt.SignatureError, "another key"),
    "other-directory": (dt.IntegrityError, "missing: .*tokenizer/vocab.txt"),
}


@pytest.mark.parametrize("signer", ["ours", "model_signing"])
@pytest.mark.parametrize("tamper", list(TAMPERS))
def test_tampering_is_refused_by_both(model, tmp_path, tamper, signer):
    key, pub = write_key(tmp_path / "k.pem", ec.generate_private_key(ec.SECP256R1()))
    sig = tmp_path / "model.sig"
    if signer == "ours":
        dt.sign_model(model, key, sig)
    else:
        assert model_signing("sign", "key", model, "--private_key", key, "--signature", sig).returncode == 0
    target = model
    if tamper == "changed":
        with open(model / "config.json", "a") as f:
            f.write(" ")
    elif tamper == "added":
        (model / "extra.bin").write_bytes(b"\0")
    elif tamper == "added-nested":
        (model / "tokenizer" / "deeper" / "extra.txt").write_text("x")
    elif tamper == "removed":
        (model / "tokenizer" / "vocab.txt").unlink()
    elif tamper == "renamed":
        (model / "head.dt").rename(model / "head2.dt")
    elif tamper.startswith("bundle"):
        sig.write_text(_flip_b64(sig.read_text(), "sig" if "sig" in tamper else "payload"))
    elif tamper == "wrong-key":
        _, pub = write_key(tmp_path / "other.pem", ec.generate_private_key(ec.SECP256R1()))
    elif tamper == "other-directory":
        target = tmp_path / "other"
        target.mkdir()
        (target / "config.json").write_text("{}")
    kind, pattern = TAMPERS[tamper]
    with pytest.raises(kind, match=pattern):
        dt.verify_model(target, pub, sig)
    r = model_signing("verify", "key", target, "--public_key", pub, "--signature", sig)
    assert r.returncode != 0, f"model_signing accepted {tamper}: {r.stdout}{r.stderr}"


def test_ignored_paths_may_change(model, tmp_path):
    """.git and friends, and paths the signer chose to ignore, are not checked."""
    key, pub = write_key(tmp_path / "k.pem", ec.generate_private_key(ec.SECP256R1()))
    dt.sign_model(model, key, ignore_paths=["logs"])
    (model / ".git" / "HEAD").write_text("changed")
    (model / ".gitattributes").write_text("*.dt filter=lfs")
    (model / "logs").mkdir()
    (model / "logs" / "train.log").write_text("step 1")
    dt.verify_model(model, pub)
    r = model_signing("verify", "key", model, "--public_key", pub, "--signature", model / "model.sig")
    assert r.returncode == 0, r.stdout + r.stderr


def test_symlinks_are_refused_unless_allowed(model, tmp_path):
    key, pub = write_key(tmp_path / "k.pem", ec.generate_private_key(ec.SECP256R1()))
    os.symlink(model / "config.json", model / "link.json")
    with pytest.raises(dt.DeathTensorsError, match="symbolic link"):
        dt.sign_model(model, key)
    dt.sign_model(model, key, allow_symlinks=True)
    assert "link.json" in dt.verify_model(model, pub)["files"]
    r = model_signing(
        "verify", "key", model, "--public_key", pub, "--signature", model / "model.sig", "--allow_symlinks"
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_keys_it_does_not_take_are_named(model, tmp_path):
    jwk = tmp_path / "k.jwk"
    jwk.write_text(dt.generate_key().to_jwk() if hasattr(dt.generate_key(), "to_jwk") else "{}")
    with pytest.raises(dt.DeathTensorsError, match="ECDSA key on P-256 or P-384 in PEM"):
        dt.sign_model(model, jwk)
    p521, pub521 = write_key(tmp_path / "p521.pem", ec.generate_private_key(ec.SECP521R1()))
    with pytest.raises(dt.DeathTensorsError, match="P-521"):
        dt.sign_model(model, p521)
    with pytest.raises(dt.DeathTensorsError, match="P-521"):
        dt.verify_model(model, pub521)
    with pytest.raises(TypeError):
        dt.verify_model(model)


#: The keys of every `verify --json` / `verify-model --json` report.
VERIFY_REPORT_KEYS = [
    "path", "kind", "ok", "verdict", "checked", "unverified", "signers", "signer_keys", "failures", "error",
]


def test_cli_round_trip_and_exit_codes(model, tmp_path):
    key, pub = write_key(tmp_path / "k.pem", ec.generate_private_key(ec.SECP256R1()))
    r = cli("sign-model", model, "--private-key", key)
    assert r.returncode == 0, r.stderr
    assert "7 files" in r.stdout
    r = cli("verify-model", model, "--public-key", pub, "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    # `verify`'s one shape (crates/cli/src/verdict.rs), what was checked under "checked".
    assert sorted(report) == sorted(VERIFY_REPORT_KEYS)
    assert report["kind"] == "model" and report["ok"] is True and report["verdict"] == "ok"
    assert "config.json" in [f["name"] for f in report["checked"]["files"]]
    assert model_signing("verify", "key", model, "--public_key", pub, "--signature", model / "model.sig").returncode == 0
    (model / "config.json").write_text("{}")
    r = cli("verify-model", model, "--public-key", pub)
    assert r.returncode == 1 and "config.json" in r.stderr
    r = cli("verify-model", model, "--public-key", pub, "--json")
    failed = json.loads(r.stdout)
    assert r.returncode == 1 and sorted(failed) == sorted(VERIFY_REPORT_KEYS)
    assert failed["ok"] is False and failed["verdict"] == "failed" and "config.json" in failed["error"]
    r = cli("sign-model", "--help")
    assert "P-256 or P-384" in r.stdout and "Ed25519" in r.stdout


# -- lazy per-tensor verification --------------------------------------------


def test_signed_model_loads_each_tensor_checked_and_model_signing_still_verifies(model, keys):
    key, pub = keys
    dt.sign_model(model, key)
    # Our field rides in the signed statement; the reference tool ignores it.
    statement = json.loads(base64.b64decode(json.loads((model / "model.sig").read_text())["dsseEnvelope"]["payload"]))
    committed = {f["name"] for f in statement["predicate"]["deathtensors"]["files"]}
    assert committed == {"head.dt", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}
    r = model_signing("verify", "key", model, "--public_key", pub, "--signature", model / "model.sig")
    assert r.returncode == 0, r.stdout + r.stderr

    signed = dt.open_signed_model(model, pub)
    assert sorted(signed.files()) == sorted(committed) and "3 tensor files" in repr(signed)
    with signed.open("head.dt") as f:
        assert f.get_tensor("head", framework="numpy").tolist() == np.arange(12).reshape(3, 4).tolist()
    with signed.open_sharded("model.safetensors.index.json") as f:
        assert f.get_tensor("b", framework="numpy").shape == (16,)
    # The same through dt.open's keyword.
    with dt.open(model / "model-00001-of-00002.safetensors", signed_model=signed) as f:
        assert f.get_tensor("a", framework="numpy").shape == (64, 32)


def test_a_changed_tensor_is_refused_when_read_and_a_changed_header_on_open(model, tmp_path):
    key, pub = write_key(tmp_path / "k.pem", ec.generate_private_key(ec.SECP256R1()))
    st_save(
        {"x": np.ones(256, np.float32), "y": np.zeros(256, np.float32)}, str(model / "two.safetensors")
    )
    dt.sign_model(model, key)
    signed = dt.open_signed_model(model, pub)
    path = model / "two.safetensors"
    data = bytearray(path.read_bytes())
    data[-1] ^= 1  # a byte of the last tensor
    path.write_bytes(bytes(data))
    with signed.open("two.safetensors") as f:
        first = min(["x", "y"], key=lambda n: f.info(n)["data_offsets"][0])
        last = max(["x", "y"], key=lambda n: f.info(n)["data_offsets"][0])
        f.get_tensor(first, framework="numpy")  # untouched: loads
        with pytest.raises(dt.IntegrityError, match=last):
            f.get_tensor(last, framework="numpy")
    # A header edit that keeps the file valid: refused on open.
    n = int.from_bytes(data[:8], "little")
    header = bytes(data[8:8 + n]).replace(b'"F32"', b'"I32"')
    path.write_bytes(bytes(data[:8]) + header + bytes(data[8 + n:]))
    dt.open(path).close()  # a valid file, just not the signed one
    with pytest.raises(dt.IntegrityError, match="header differs from the signed one"):
        signed.open("two.safetensors")
    # A file the signature does not list.
    shutil.copy(model / "head.dt", model / "other.dt")
    with pytest.raises(dt.IntegrityError, match="does not list this file"):
        signed.open("other.dt")


def test_model_signing_bundles_carry_no_commitments(model, tmp_path):
    key, pub = write_key(tmp_path / "k.pem", ec.generate_private_key(ec.SECP256R1()))
    assert model_signing("sign", "key", model, "--private_key", key, "--signature", model / "model.sig").returncode == 0
    with pytest.raises(dt.SignatureError, match="verify_model"):
        dt.open_signed_model(model, pub)


def _read_bytes():
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("rchar:")).split()[1])


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="counts bytes read through /proc/self/io (Linux)")
def test_a_lazy_verified_load_reads_the_header_and_that_tensor_only(tmp_path):
    root = tmp_path / "big"
    root.mkdir()
    tensors = {f"t{i}": np.full(1 << 20, i, np.uint8) for i in range(16)}  # 16 MiB
    st_save(tensors, str(root / "model.safetensors"))
    key, pub = write_key(tmp_path / "k.pem", ec.generate_private_key(ec.SECP256R1()))
    dt.sign_model(root, key)
    signed = dt.open_signed_model(root, pub)
    before = _read_bytes()
    with signed.open("model.safetensors") as f:
        t = f.get_tensor("t7", framework="numpy")
    read = _read_bytes() - before
    assert (t == 7).all()
    head = 8 + int.from_bytes((root / "model.safetensors").read_bytes()[:8], "little")
    # The header (read to parse it and again to check it), the tensor, and
    # the small reads of opening: far below the file's 16 MiB.
    assert (1 << 20) <= read <= (1 << 20) + 4 * head + (256 << 10), read
