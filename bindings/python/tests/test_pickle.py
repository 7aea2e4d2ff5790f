"""Torch pickle checkpoints read without running them (docs/PICKLE.md):
every tensor equal to torch.load(weights_only=True)'s bit for bit, the
corpus of legitimate checkpoints of pickle_corpus.py, and its hostile
files: nothing runs (each payload proven live through the real pickle in
a child process), each refused with an error naming what it refers to."""

import os
import subprocess
import sys

import pytest

import deathtensors as dt
from deathtensors._torch_file import TorchFile, scan
from deathtensors.errors import DeathTensorsError

torch = pytest.importorskip("torch")

import pickle_corpus  # noqa: E402


def same_bits(a, b):
    """Equal dtype, shape and bytes (NaN payloads, -0.0 and subnormals)."""
    if a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape):
        return False
    a, b = a.contiguous(), b.contiguous()
    if a.dtype == torch.bool:
        return torch.equal(a, b)
    return torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


@pytest.fixture(scope="module")
def legit(tmp_path_factory):
    return pickle_corpus.legit(tmp_path_factory.mktemp("legit"))


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    return pickle_corpus.hostile(tmp_path_factory.mktemp("hostile"))


def test_every_legitimate_checkpoint_reads_as_torch_loads_it(legit):
    """Every case of the corpus: the same names, the same tensors bit for
    bit, the same plain values, where deathtensors reads the format."""
    read = 0
    refused = []
    for case in legit:
        if case.expect is None:
            continue
        try:
            f = dt.open(case.path)
        except DeathTensorsError as e:
            refused.append((case.name, str(e)))
            continue
        assert isinstance(f, TorchFile), case.name
        assert sorted(f.keys()) == sorted(case.expect), (case.name, f.keys(), list(case.expect))
        for name, want in case.expect.items():
            got = f.get_tensor(name)
            assert same_bits(got, want), (case.name, name, got, want)
        meta = f.metadata()
        for k, v in case.metadata.items():
            assert meta.get(k) == pickle_corpus_text(v), (case.name, k, meta.get(k), v)
        read += 1
    # Refused by design, by name, never misread: packed float4 (not read yet).
    for name, why in refused:
        assert "not read yet" in why, (name, why)
    assert read >= 10, (read, refused)
    print(f"{read} legitimate checkpoints read as torch reads them; refused by design: {[n for n, _ in refused]}", file=sys.stderr)


def pickle_corpus_text(v):
    """How a plain value is kept as metadata text."""
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, float):
        return "nan" if v != v else ("inf" if v == float("inf") else ("-inf" if v == float("-inf") else repr(v)))
    return str(v)


#: Where our message words it otherwise than the corpus guessed.
SAYS = {"stack-bomb-depth": "nesting depth", "size-bomb-shape-overflow": "overflows"}


def test_hostile_files_run_nothing_and_are_refused_naming_why(hostile, tmp_path):
    """Every hostile file of the corpus is refused, naming the global, the
    limit or the rule; none reads without an error."""
    marker = tmp_path / "ran"
    for h in hostile:
        h.must_mention = SAYS.get(h.name, h.must_mention)
        try:
            f = dt.open(h.path)
            f.get_tensors(framework="numpy")
        except (DeathTensorsError, OSError, ValueError) as e:
            text = str(e)
            assert h.must_mention.lower() in text.lower(), (h.name, h.must_mention, text)
        else:
            raise AssertionError(f"{h.name}: read without an error")
        assert not marker.exists()


def test_hostile_payloads_are_live(hostile, tmp_path):
    """The payloads of the corpus do run through the real pickle (in a
    child process): the refusals above stop live code, not dead bytes."""
    # One file of each kind of payload (a child process each: torch's start
    # is a second or two).
    sample = {}
    for h in hostile:
        if h.victim is not None and h.kind not in sample and "unregistered" not in h.name and "stack" not in h.name:
            sample[h.kind] = h
    live = [h.name for h in sample.values() if pickle_corpus.prove_live(h, tmp_path / h.name)]
    assert len(live) >= 6, (live, list(sample))
    print(f"live payloads refused: {live}", file=sys.stderr)


def test_without_torch_open_convert_and_scan_work(tmp_path):
    """With torch unimportable (as in a venv holding only the wheel and
    numpy): dt.open of a .pt gives numpy arrays, and the command line's
    convert and scan work; none imports torch."""
    testdata = os.path.join(os.path.dirname(__file__), "..", "..", "..", "testdata", "torch")
    views = os.path.abspath(os.path.join(testdata, "views.pt"))
    out = tmp_path / "views.safetensors"
    program = f"""
import sys
sys.modules["torch"] = None  # any import of torch fails
import numpy as np
import deathtensors as dt
from deathtensors import _native
f = dt.open({views!r})
a = f.get_tensor("t", framework="numpy")
assert a.tolist() == [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]], a
assert f.metadata() == {{"step": "7", "name": "run"}}
assert _native.cli_main(["deathtensors", "convert", {views!r}, {str(out)!r}]) == 0
assert _native.cli_main(["deathtensors", "scan", {views!r}]) == 0
assert "torch" not in [m for m in sys.modules if sys.modules[m] is not None]
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr
    assert out.exists()


def _bin_checkpoint(model, directory, max_shard_size=None):
    """``model``'s weights as transformers 4's ``save_pretrained(...,
    safe_serialization=False)`` wrote them (transformers 5 writes only
    safetensors): ``torch.save`` of the state dict, tied weights sharing
    their storage, sharded by huggingface_hub's rule into
    ``pytorch_model-0000k-of-0000n.bin`` with ``pytorch_model.bin.index.json``."""
    import json

    from huggingface_hub import split_torch_state_dict_into_shards

    directory.mkdir()
    sd = model.state_dict()
    if max_shard_size is None:
        torch.save(sd, directory / "pytorch_model.bin")
        return directory / "pytorch_model.bin", sd
    split = split_torch_state_dict_into_shards(sd, filename_pattern="pytorch_model{suffix}.bin", max_shard_size=max_shard_size)
    for name, keys in split.filename_to_tensors.items():
        torch.save({k: sd[k] for k in keys}, directory / name)
    index = {"metadata": {"total_size": sum(t.numel() * t.element_size() for t in sd.values())}, "weight_map": split.tensor_to_filename}
    (directory / "pytorch_model.bin.index.json").write_text(json.dumps(index))
    assert split.is_sharded
    return directory / "pytorch_model.bin.index.json", sd


@pytest.mark.parametrize("arch", ["gpt2", "llama", "bert"])
def test_transformers_checkpoints_convert_single_and_sharded(tmp_path, arch):
    """Small GPT-2 (tied embeddings), Llama and BERT checkpoints: every
    tensor as torch.load gives it, tied weights written once and recorded
    as safetensors' convert.py records them, and a sharded checkpoint's
    index converted with its shards; the result loads in safetensors."""
    import transformers
    from safetensors import safe_open

    torch.manual_seed(0)
    if arch == "gpt2":
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=64))
    elif arch == "llama":
        cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, vocab_size=100)
        model = transformers.LlamaForCausalLM(cfg)
    else:
        model = transformers.BertModel(transformers.BertConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, vocab_size=100))
    single, sd = _bin_checkpoint(model, tmp_path / "single")
    index, _ = _bin_checkpoint(model, tmp_path / "sharded", max_shard_size="20KB")
    # dt.open reads the .bin as torch.load does.
    with dt.open(single) as f:
        assert sorted(f.keys()) == sorted(sd)
        for k, v in sd.items():
            assert same_bits(f.get_tensor(k), v), k
    from deathtensors import _native

    out = tmp_path / "single.safetensors"
    assert _native.cli_main(["deathtensors", "convert", str(single), str(out)]) == 0
    # Tied weights: one tensor kept (first in name order), the others named
    # in the metadata, as safetensors' convert.py does.
    shared = {}
    for k, v in sd.items():
        shared.setdefault((v.untyped_storage().data_ptr(), v.storage_offset(), tuple(v.shape), v.stride()), []).append(k)
    tied = {removed: sorted(g)[0] for g in shared.values() for removed in sorted(g)[1:]}
    if arch == "gpt2":
        assert tied == {"transformer.wte.weight": "lm_head.weight"}, tied
    with safe_open(out, "pt") as f:
        assert sorted(f.keys()) == sorted(k for k in sd if k not in tied)
        for k in f.keys():
            assert same_bits(f.get_tensor(k), sd[k]), k
        meta = f.metadata() or {}
        assert {k: meta[k] for k in tied} == tied
    if not tied:
        # Byte for byte what safetensors writes for torch.load's result.
        from safetensors.torch import save_file

        save_file(torch.load(single, weights_only=True), tmp_path / "reference.safetensors")
        assert out.read_bytes() == (tmp_path / "reference.safetensors").read_bytes()
    # The sharded one: shards and index.
    out_index = tmp_path / "hf" / "model.safetensors.index.json"
    out_index.parent.mkdir()
    assert _native.cli_main(["deathtensors", "convert", str(index), str(out_index)]) == 0
    import json

    written = json.loads(out_index.read_text())
    shards = sorted(set(written["weight_map"].values()))
    assert len(shards) > 1 and all(s.startswith("model-") and s.endswith(".safetensors") for s in shards), shards
    seen = {}
    for s in shards:
        with safe_open(out_index.parent / s, "pt") as f:
            for k in f.keys():
                seen[k] = f.get_tensor(k)
    assert sorted(seen) == sorted(written["weight_map"])
    for k, v in seen.items():
        assert same_bits(v, sd[k]), k


@pytest.mark.parametrize("header_len", [0x280, 0x580, 0x10280])
def test_a_safetensors_header_length_like_a_pickle_magic_is_not_taken_for_one(tmp_path, header_len):
    """A safetensors file whose 8-byte header length starts 80 02..80 05 (a
    640- to 1408-byte header, or longer) looks like a pickle's PROTO: it
    must open as the safetensors file it is (seen in CI: a signed model's
    model.safetensors was taken for a torch checkpoint)."""
    import json
    import struct

    import numpy as np

    from deathtensors import _native

    header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    header += b" " * (header_len - len(header))
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", header_len) + header + np.array([1.5, -2.0], np.float32).tobytes())
    assert path.read_bytes()[0] == 0x80 and path.read_bytes()[1] in (2, 5, 2)
    assert not _native.is_torch_checkpoint(str(path))
    with dt.open(path) as f:
        assert not isinstance(f, TorchFile)
        assert f.get_tensor("w", framework="numpy").tolist() == [1.5, -2.0]
