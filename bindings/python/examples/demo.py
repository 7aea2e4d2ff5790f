"""The README's main job: write a model from Python, inspect, verify and
convert it with the command line, and load it back into a model.

Run by `cargo xtask demo` (which builds everything first), or as
`python demo.py [DEATHTENSORS_BINARY]`.
"""

import pathlib
import subprocess
import sys
import tempfile

import torch

import deathtensors as dt


def sh(*args):
    print("$", " ".join(map(str, args)), flush=True)
    subprocess.run([str(a) for a in args], check=True)


def main():
    cli = sys.argv[1] if len(sys.argv) > 1 else "deathtensors"
    torch.manual_seed(0)
    model = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, batch_first=True), num_layers=2)
    model.eval()
    x = torch.randn(5, 3, 64)
    with torch.no_grad():
        expected = model(x)

    with tempfile.TemporaryDirectory() as d:
        d = pathlib.Path(d)
        state = {k: v for k, v in model.state_dict().items()}
        dt.save(d / "model.dt", state, global_metadata={"model": "tiny-transformer", "license": "MIT"}, checksum=True)
        print(f"saved {len(state)} tensors to model.dt")

        sh(cli, "inspect", d / "model.dt")
        sh(cli, "verify", d / "model.dt")
        sh(cli, "convert", d / "model.dt", d / "model.safetensors")
        sh(cli, "convert", d / "model.safetensors", d / "roundtrip.dt", "--checksum")
        sh(cli, "diff", d / "model.dt", d / "roundtrip.dt")
        sh(cli, "stats", d / "model.dt", "layers.0.linear1.weight")

        for name in ["model.dt", "model.safetensors", "roundtrip.dt"]:
            with dt.open(d / name, verify=name.endswith(".dt")) as f:
                loaded = f.get_tensors()
            fresh = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, batch_first=True), num_layers=2)
            fresh.load_state_dict(loaded)
            fresh.eval()
            with torch.no_grad():
                got = fresh(x)
            assert torch.equal(got, expected), name
            print(f"loaded {name} into a fresh model: outputs identical")

        # Encrypted and signed: keys from the command line, loaded from Python.
        sh(cli, "keygen", "--type", "symmetric", "--kid", "team", "--out", d / "team.jwk")
        sh(cli, "keygen", "--type", "ed25519", "--kid", "publisher", "--out", d / "publisher.jwk",
           "--public-out", d / "publisher.pub.jwk")
        sh(cli, "encrypt", d / "model.safetensors", d / "secret.dt", "--to", d / "team.jwk",
           "--sign", d / "publisher.jwk", "--seal-header")
        sh(cli, "inspect", d / "secret.dt")
        sh(cli, "verify", d / "secret.dt", "--key", d / "team.jwk", "--signer", d / "publisher.pub.jwk")
        with dt.open(d / "secret.dt", keys=str(d / "team.jwk"), trusted_signers=str(d / "publisher.pub.jwk")) as f:
            loaded = f.get_tensors()
        fresh = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, batch_first=True), num_layers=2)
        fresh.load_state_dict(loaded)
        fresh.eval()
        with torch.no_grad():
            assert torch.equal(fresh(x), expected)
        print("loaded secret.dt (encrypted, sealed, signed) into a fresh model: outputs identical")

        # A growing collection of embeddings: the model's outputs, appended
        # batch by batch, then inspected, verified and exported.
        with dt.TensorBlob.open(d / "embeddings", "w", dtype="float32", shape=64, block_size=8) as blob:
            for batch in expected:
                blob.write(batch)
        sh(cli, "inspect", d / "embeddings")
        sh(cli, "verify", d / "embeddings")
        sh(cli, "blob", "export", d / "embeddings", d / "embeddings.safetensors", "--rows", "0:10")
        with dt.TensorBlob.open(d / "embeddings", "r") as blob:
            assert len(blob) == 15 and torch.equal(blob[3:6], expected[1]) and torch.equal(blob[-1], expected[-1, -1])
        print("appended 15 embeddings to a collection, read them back by index: identical")
    print("demo: ok")


if __name__ == "__main__":
    main()
