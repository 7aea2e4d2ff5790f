"""The edges of deathtensors 0.3.0's API here: what 0.3.0 did unsafely or
wrongly is done safely (append never loses the file, slices read only their
rows, hostile sparse parts and manifests get clear errors)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import deathtensors as dt


def test_append_that_fails_leaves_the_file_and_no_temp_file(tmp_path):
    path = tmp_path / "m.dt"
    dt.save(path, {"a": np.arange(4, dtype=np.float32)}, checksum=True)
    before = path.read_bytes()
    with pytest.raises(dt.DeathTensorsError, match="already in the file"):
        dt.append(path, {"a": np.zeros(1)})
    with pytest.raises(dt.DeathTensorsError, match="need 8"):
        dt.append_file(path, [("b", "F32", [2], b"\0" * 4, {})])
    with pytest.raises(dt.DeathTensorsError, match="not appended"):
        dt.append(path, {"b": np.zeros(1)}, metadata={"c": {"k": "v"}})
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["m.dt"]


def test_append_streams_big_files_and_keeps_digests(tmp_path):
    path = tmp_path / "big.dt"
    big = np.random.default_rng(0).standard_normal((3, 1 << 20)).astype(np.float32)  # 12 MiB: several chunks
    dt.save(path, {"big": big}, checksum=True)
    dt.append(path, {"small": np.ones(3, np.int8)})
    with dt.open(path) as f:
        assert f.verify() and f.keys() == ["big", "small"]
        assert np.array_equal(f.get_tensor("big", framework="numpy"), big)
        assert f.info("small")["sha256"] is not None


def test_append_refuses_signed_and_encrypted_files(tmp_path):
    key = dt.generate_key("symmetric")
    signer = dt.generate_key("ed25519")
    for name, kwargs in [("enc.dt", {"encrypt": key}), ("signed.dt", {"sign": signer})]:
        path = tmp_path / name
        dt.save(path, {"a": np.ones(2, np.float32)}, **kwargs)
        with pytest.raises(dt.DeathTensorsError, match="encrypted|signed"):
            dt.append(path, {"b": np.ones(1)})


def test_slices_read_only_their_rows(tmp_path):
    path = tmp_path / "emb.dt"
    table = np.arange(1000 * 8, dtype=np.int32).reshape(1000, 8)
    dt.save(path, {"emb": table, "scalar": np.float32(3.0), "empty": np.zeros((0, 4), np.float32)})
    with dt.open(path) as f:
        for start, count in [(0, 1), (999, 1), (10, 990), (500, None), (7, 0)]:
            got = f.get_tensor_slice("emb", start, count, framework="numpy")
            assert np.array_equal(got, table[start:None if count is None else start + count])
        t = f.get_tensor_slice("emb", 3, 2)
        assert isinstance(t, torch.Tensor) and t.tolist() == table[3:5].tolist()
        for bad in [(-1, 1), (1000, None), (990, 11), (0, -1)]:
            with pytest.raises(dt.DeathTensorsError, match="out of range|exceeds"):
                f.get_tensor_slice("emb", *bad)
        with pytest.raises(dt.DeathTensorsError, match="scalar"):
            f.get_tensor_slice("scalar")
        with pytest.raises(dt.DeathTensorsError, match="out of range"):
            f.get_tensor_slice("empty")


def test_stats_handle_nan_empty_and_every_dtype(tmp_path):
    path = tmp_path / "s.dt"
    dt.save(path, {
        "nan": np.array([np.nan, np.nan], np.float32),
        "empty": np.zeros(0, np.float64),
        "mixed": np.array([1, -2, 0, np.inf], np.float64),
        "bool": np.array([True, True]),
        "u64": np.array([2**63, 1], np.uint64),
    })
    with dt.open(path) as f:
        s = f.all_stats()
    assert np.isnan(s["nan"]["min"]) and np.isnan(s["nan"]["mean"]) and s["nan"]["nan"] == 2
    assert np.isnan(s["empty"]["min"]) and s["empty"]["mean"] == 0.0 and s["empty"]["count"] == 0
    m = s["mixed"]
    assert (m["min"], m["max"], m["nnz"], m["inf"], m["zeros"], m["count"]) == (-2, 1, 2, 1, 1, 4)
    assert m["mean"] == pytest.approx(-1 / 3) and m["stddev"] == pytest.approx(np.std([1, -2, 0]))
    assert (s["bool"]["min"], s["bool"]["max"], s["bool"]["nnz"]) == (1, 1, 2)
    assert s["u64"]["max"] == float(2**63)


def test_hostile_sparse_parts_get_clear_errors(tmp_path):
    path = tmp_path / "sp.dt"
    cases = {
        "out": (torch.tensor([[0, 5]]), torch.ones(2), torch.tensor([3])),
        "neg": (torch.tensor([[0, -1]]), torch.ones(2), torch.tensor([3])),
        "rank": (torch.tensor([0, 1]), torch.ones(2), torch.tensor([3])),
        "count": (torch.tensor([[0, 1]]), torch.ones(3), torch.tensor([3])),
        "shape": (torch.tensor([[0, 1]]), torch.ones(2), torch.tensor([[3]])),
        "dtype": (torch.tensor([[0, 1]], dtype=torch.int32), torch.ones(2), torch.tensor([3])),
    }
    tensors = {f"{k}.{role}": t for k, parts in cases.items() for role, t in zip(("indices", "values", "shape"), parts)}
    dt.save(path, tensors)
    with dt.open(path) as f:
        for name in cases:
            with pytest.raises(dt.DeathTensorsError, match=f"sparse tensor '{name}'"):
                dt.get_sparse(f, name)


def test_sparse_round_trip_keeps_dense_dims_and_user_metadata(tmp_path):
    path = tmp_path / "sp.dt"
    s = torch.sparse_coo_tensor([[0, 2]], torch.arange(6.0).reshape(2, 3), (4, 3), check_invariants=True)  # one sparse dim, one dense
    dt.save_sparse(path, {"s": s}, metadata={"s.values": {"note": "x"}}, global_metadata={"g": "1"})
    with dt.open(path) as f:
        assert torch.equal(dt.get_sparse(f, "s").to_dense(), s.to_dense())
        assert f.info("s.values")["metadata"] == {"note": "x", "sparse_role": "values", "sparse_parent": "s"}
        assert f.metadata() == {"g": "1"}


def test_diff_tolerances_and_open_files(tmp_path):
    a, b = tmp_path / "a.dt", tmp_path / "b.safetensors"
    dt.save(a, {"x": np.array([1.0, 2.0], np.float32)})
    dt.save(b, {"x": np.array([1.0, 2.001], np.float32)}, format="safetensors")
    assert dt.diff(a, b)["value_changed"] == ["x"]
    with dt.open(a) as fa, dt.open(b) as fb:
        assert dt.diff(fa, fb, rtol=1e-3)["equal"]
    with pytest.raises(dt.DeathTensorsError, match="non-negative"):
        dt.diff(a, b, atol=-1)


def test_manifests_hostile_and_cli(tmp_path):
    path = tmp_path / "m.dt"
    dt.save(path, {"x": np.ones(2, np.float32)}, checksum=True)
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    with pytest.raises(dt.DeathTensorsError, match="JSON object"):
        dt.read_manifest(bad)
    r = subprocess.run([sys.executable, "-m", "deathtensors", "manifest", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    m = dt.read_manifest(str(path) + ".json")
    assert m["tensors"]["x"]["sha256"] == dt.open(path).info("x")["sha256"]
    for alias, expect in [("info", "x"), ("list", "x")]:
        r = subprocess.run([sys.executable, "-m", "deathtensors", alias, str(path)], capture_output=True, text=True)
        assert r.returncode == 0 and expect in r.stdout, r.stderr


def test_both_sharded_layouts_and_the_stem_shortcut(tmp_path):
    tensors = {f"l{i}": np.full(100, i, np.float32) for i in range(4)}
    (tmp_path / "hf").mkdir()
    hf = dt.save_sharded(tmp_path / "hf" / "model", tensors, max_shard_bytes=800)
    assert os.path.exists(tmp_path / "hf" / "model.deathtensors.index.json") and len(hf) == 2
    with dt.open_sharded(tmp_path / "hf" / "model") as r:  # the stem finds the index
        assert r.keys() == list(tensors) and r.which_shard("l3") == "model-00002-of-00002.deathtensors"
    forced = dt.save_sharded(tmp_path / "x.deathtensors", tensors, max_shard_bytes=800, layout="huggingface")
    assert os.path.basename(forced[0]) == "x-00001-of-00002.deathtensors"
    legacy = dt.save_sharded(tmp_path / "y", tensors, max_shard_bytes=800, layout="deathtensors-0.3")
    assert [os.path.basename(p) for p in legacy] == ["y-00001-of-0002.deathtensors", "y-00002-of-0002.deathtensors"]
    with dt.open_sharded(tmp_path / "y") as r:
        assert r.get_tensor("l2", framework="numpy")[0] == 2
    with pytest.raises(dt.DeathTensorsError, match="layout"):
        dt.save_sharded(tmp_path / "z", tensors, layout="nope")
    with pytest.raises(dt.DeathTensorsError, match="encrypted or signed"):
        dt.save_sharded(tmp_path / "z.dt", tensors, encrypt=dt.generate_key("symmetric"))


def test_legacy_index_listing_a_tensor_twice_is_refused(tmp_path):
    dt.save(tmp_path / "s1.dt", {"a": np.ones(1)})
    shards = json.dumps([{"path": "s1.dt", "tensors": ["a"], "bytes": 8}, {"path": "s1.dt", "tensors": ["a"], "bytes": 8}])
    dt.save(tmp_path / "idx.dt", {}, global_metadata={"deathtensors.sharded": "true", "deathtensors.shards": shards})
    with pytest.raises(dt.DeathTensorsError, match="listed in two shards"):
        dt.open_sharded(tmp_path / "idx.dt")


def test_conversions_stream_without_torch_and_keep_metadata(tmp_path):
    st = tmp_path / "m.safetensors"
    dt.save(st, {"a": np.arange(3, dtype=np.int16)}, global_metadata={"format": "pt"}, format="safetensors")
    out = dt.from_safetensors(st, checksum=False)
    assert out == str(tmp_path / "m.deathtensors")
    with dt.open(out) as f:
        assert f.metadata() == {"format": "pt", "deathtensors.converted_from": "safetensors",
                                "deathtensors.source.filename": "m.safetensors"}
        assert not f.has_checksum()
    back = dt.to_safetensors(out)
    assert back == str(tmp_path / "m.safetensors")
    with dt.open(back) as f:
        assert f.format == "safetensors" and f.get_tensor("a", framework="numpy").tolist() == [0, 1, 2]


def test_paths_expand_home_and_variables(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("DT_DIR", "sub")
    (tmp_path / "sub").mkdir()
    dt.save(tmp_path / "sub" / "m.dt", {"a": np.ones(1)})
    with dt.open("~/$DT_DIR/m.dt") as f:
        assert f.path == str(tmp_path / "sub" / "m.dt")


def test_hub_functions_say_why_they_are_absent():
    from deathtensors import huggingface

    with pytest.raises(dt.DeathTensorsError, match="never touches the network"):
        huggingface.load_from_hub("org/repo", "model.deathtensors")
    with pytest.raises(dt.DeathTensorsError, match="hf_hub_download"):
        huggingface.HubCachedFile(repo_id="org/repo", filename="m.dt")
