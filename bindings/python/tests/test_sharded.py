"""Sharded checkpoints: ours, Hugging Face's and deathtensors 0.3.0's."""

import json

import numpy as np
import pytest
import torch

import deathtensors as dt
from conftest import TESTDATA, sha256


def test_save_and_open_sharded(tmp_path):
    tensors = {f"model.layers.{i}.weight": torch.full((64, 64), float(i)) for i in range(6)}
    shards = dt.save_sharded(tmp_path / "model", tensors, max_shard_bytes=40000)
    assert len(shards) == 6 // 2
    assert [p.rsplit("/", 1)[1] for p in shards] == [f"model-0000{i}-of-00003.deathtensors" for i in (1, 2, 3)]
    index = json.loads((tmp_path / "model.deathtensors.index.json").read_text())
    assert index["metadata"]["total_size"] == 6 * 64 * 64 * 4
    assert set(index["weight_map"]) == set(tensors)
    with dt.open_sharded(tmp_path / "model.deathtensors.index.json", verify=True) as f:
        assert f.keys() == sorted(tensors) or set(f.keys()) == set(tensors)
        f2 = dt.open_sharded(tmp_path / "model.deathtensors.index.json")
        assert torch.equal(f2.get_tensor("model.layers.4.weight"), tensors["model.layers.4.weight"])
        assert f2.opened_shards() == 1
        assert f.get_tensors().keys() == tensors.keys()
        for copy in (False, True):
            loaded = f.get_tensors(copy=copy)
            assert list(loaded) == f.keys()
            assert all(torch.equal(loaded[k], v) for k, v in tensors.items())
            loaded["model.layers.0.weight"] += 1  # writable, and the caller's
            assert torch.equal(f.get_tensor("model.layers.0.weight"), tensors["model.layers.0.weight"])


def test_index_placing_a_tensor_in_the_wrong_shard_is_named(tmp_path):
    import shutil

    src = TESTDATA / "valid/safetensors-0.8.0/sharded"
    for p in src.iterdir():
        shutil.copy(p, tmp_path / p.name)
    index = tmp_path / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    data["weight_map"]["model.layers.3.weight"] = "model-00001-of-00002.safetensors"
    index.write_text(json.dumps(data))
    with dt.open_sharded(index) as f:
        with pytest.raises(dt.DeathTensorsError, match='"model.layers.3.weight" in this shard, which does not contain it'):
            f.get_tensors(framework="numpy")


def test_hugging_face_checkpoint(tmp_path, manifest):
    index = TESTDATA / "valid/safetensors-0.8.0/sharded/model.safetensors.index.json"
    with dt.open_sharded(index) as f:
        assert len(f) == 4 and f.total_size == 4096
        rel = "safetensors-0.8.0/sharded/model-00002-of-00002.safetensors"
        assert sha256(f.get_bytes("model.layers.3.weight")) == manifest["files"][rel]["tensors"]["model.layers.3.weight"]["sha256"]
        assert f.opened_shards() == 1
        assert f.verify()
    # Writing one gives safetensors shards and index.
    shards = dt.save_sharded(tmp_path / "model", {"a": np.ones(4, np.float32), "b": np.zeros(4, np.int64)},
                             max_shard_bytes=16, format="safetensors")
    assert shards[0].endswith("model-00001-of-00002.safetensors")
    assert (tmp_path / "model.safetensors.index.json").exists()


def test_deathtensors_030_sharded_set(manifest):
    with dt.open_sharded(TESTDATA / "valid/deathtensors-0.3.0/sdist-samples/sharded_model.deathtensors") as f:
        assert len(f) == 20
        rel = "deathtensors-0.3.0/sdist-samples/sharded_model-00008-of-0020.deathtensors"
        want = manifest["files"][rel]["tensors"]["layer.7.weight"]["sha256"]
        assert sha256(f.get_tensor("layer.7.weight", framework="numpy").tobytes()) == want
        assert f.opened_shards() == 1
        f.verify()


def test_hostile_index_is_refused(tmp_path):
    p = tmp_path / "evil.safetensors.index.json"
    p.write_text(json.dumps({"metadata": {"total_size": 1}, "weight_map": {"w": "../../etc/passwd"}}))
    with pytest.raises(dt.DeathTensorsError, match="plain file name"):
        dt.open_sharded(p)


@pytest.mark.parametrize("layout", ["huggingface", "deathtensors-0.3"])
def test_save_sharded_takes_alignment_and_drop_cache(tmp_path, layout):
    tensors = {f"t{i}": np.full(3, i, np.uint8) for i in range(4)}
    path = tmp_path / ("model" if layout == "huggingface" else "model.deathtensors")
    shards = dt.save_sharded(path, tensors, max_shard_bytes=6, alignment=1024, drop_cache=True, layout=layout)
    assert len(shards) == 2
    for shard in shards:
        data = open(shard, "rb").read()
        with dt.open(shard) as f:
            starts = [f.info(n)["data_offsets"][0] for n in f.keys()]
            assert starts == [0, 1024], starts
            for n in f.keys():
                assert f.get_tensor(n, framework="numpy").tolist() == [int(n[1:])] * 3
        assert len(data) > 1024
    with pytest.raises(dt.DeathTensorsError, match="alignment"):
        dt.save_sharded(tmp_path / "bad", tensors, alignment=3)
