"""The README's main job: write a model from Python, inspect, verify and
convert it with the command line, and load it back into a model.

Run by `cargo xtask demo` (which builds the package first), or as
`python demo.py [DEATHTENSORS_BINARY]` (default: `python -m deathtensors`,
the command line the package carries). The model is a small numpy MLP, so
that the demo needs nothing but numpy: the same calls take torch tensors
(`framework="torch"`), and the test suite runs them on real torch models.
"""

import pathlib
import subprocess
import sys
import tempfile

import numpy as np

import deathtensors as dt

D, H = 64, 128


def make_model(seed=0):
    """A two-layer MLP with a layer norm: name -> float32 array."""
    rng = np.random.default_rng(seed)
    return {
        "layers.0.weight": rng.standard_normal((D, H), dtype=np.float32) / D**0.5,
        "layers.0.bias": rng.standard_normal(H, dtype=np.float32) * 0.1,
        "layers.1.weight": rng.standard_normal((H, D), dtype=np.float32) / H**0.5,
        "layers.1.bias": rng.standard_normal(D, dtype=np.float32) * 0.1,
        "norm.weight": np.ones(D, np.float32) + rng.standard_normal(D, dtype=np.float32) * 0.05,
        "norm.bias": np.zeros(D, np.float32),
    }


def forward(m, x):
    h = np.maximum(x @ m["layers.0.weight"] + m["layers.0.bias"], 0)
    y = h @ m["layers.1.weight"] + m["layers.1.bias"] + x
    mu, var = y.mean(-1, keepdims=True), y.var(-1, keepdims=True)
    return (y - mu) / np.sqrt(var + 1e-5) * m["norm.weight"] + m["norm.bias"]


def main():
    cli = sys.argv[1:2] or [sys.executable, "-m", "deathtensors"]

    def sh(*args):
        print("$ deathtensors", " ".join(map(str, args)), flush=True)
        subprocess.run([*cli, *map(str, args)], check=True)

    model = make_model()
    x = np.random.default_rng(1).standard_normal((5, 3, D), dtype=np.float32)
    expected = forward(model, x)
    assert expected.dtype == np.float32

    with tempfile.TemporaryDirectory() as d:
        d = pathlib.Path(d)
        dt.save(d / "model.dt", model, global_metadata={"model": "tiny-mlp", "license": "MIT"}, checksum=True)
        print(f"saved {len(model)} tensors to model.dt")

        sh("inspect", d / "model.dt")
        sh("verify", d / "model.dt")
        sh("convert", d / "model.dt", d / "model.safetensors")
        sh("convert", d / "model.safetensors", d / "roundtrip.dt", "--checksum")
        sh("diff", d / "model.dt", d / "roundtrip.dt")
        sh("stats", d / "model.dt", "layers.0.weight")

        for name in ["model.dt", "model.safetensors", "roundtrip.dt"]:
            with dt.open(d / name, verify=name.endswith(".dt")) as f:
                loaded = f.get_tensors(framework="numpy")
            assert np.array_equal(forward(loaded, x), expected), name
            print(f"loaded {name} into a fresh model: outputs identical")

        # Encrypted and signed: keys from the command line, loaded from Python.
        sh("keygen", "--type", "symmetric", "--kid", "team", "--out", d / "team.jwk")
        sh("keygen", "--type", "ed25519", "--kid", "publisher", "--out", d / "publisher.jwk",
           "--public-out", d / "publisher.pub.jwk")
        sh("encrypt", d / "model.safetensors", d / "secret.dt", "--to", d / "team.jwk",
           "--sign", d / "publisher.jwk", "--seal-header")
        sh("inspect", d / "secret.dt")
        sh("verify", d / "secret.dt", "--key", d / "team.jwk", "--signer", d / "publisher.pub.jwk")
        with dt.open(d / "secret.dt", keys=str(d / "team.jwk"), trusted_signers=str(d / "publisher.pub.jwk")) as f:
            loaded = f.get_tensors(framework="numpy")
        assert np.array_equal(forward(loaded, x), expected)
        print("loaded secret.dt (encrypted, sealed, signed) into a fresh model: outputs identical")

        # A growing collection of embeddings: the model's outputs, appended
        # batch by batch, then inspected, verified and exported.
        with dt.TensorBlob.open(d / "embeddings", "w", dtype="float32", shape=D, block_size=8,
                                framework="numpy") as blob:
            for batch in expected:
                blob.write(batch)
        sh("inspect", d / "embeddings")
        sh("verify", d / "embeddings")
        sh("blob", "export", d / "embeddings", d / "embeddings.safetensors", "--rows", "0:10")
        with dt.TensorBlob.open(d / "embeddings", "r", framework="numpy") as blob:
            assert len(blob) == 15
            assert np.array_equal(blob[3:6], expected[1]) and np.array_equal(blob[-1], expected[-1, -1])
        print("appended 15 embeddings to a collection, read them back by index: identical")
    print("demo: ok")


if __name__ == "__main__":
    main()
