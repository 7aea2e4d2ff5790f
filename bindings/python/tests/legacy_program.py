"""A program written for deathtensors 0.3.0, calling every public name of its
API as its docs show. `test_parity.py` runs it under 0.3.0 (its wheel, in a
venv of its own) and under this package, and compares what it prints (one
JSON document) and the files it writes (in the directory argv[1]).

Under 0.3.0's venv, which has numpy only, torch and safetensors come from
the directory in DT_EXTRA_SITE, appended to sys.path so that 0.3.0's own
package stays first."""

import hashlib
import json
import os
import sys

if os.environ.get("DT_EXTRA_SITE"):
    sys.path.append(os.environ["DT_EXTRA_SITE"])

import numpy as np  # noqa: E402
import torch  # noqa: E402

import deathtensors as dt  # noqa: E402

out = sys.argv[1]
res = {}


def p(name):
    return os.path.join(out, name)


def h(b):
    return hashlib.sha256(bytes(b)).hexdigest()


def describe(f, name):
    info = f.info(name)
    return {k: info[k] for k in ("name", "dtype", "torch_dtype", "shape", "nbytes", "metadata")}


# -- module constants and helpers --------------------------------------------
res["constants"] = {
    "MAGIC": dt.MAGIC.hex(),
    "FORMAT_VERSION": dt.FORMAT_VERSION,
    "CANONICAL_EXTENSION": dt.CANONICAL_EXTENSION,
    "LEGACY_EXTENSION": dt.LEGACY_EXTENSION,
    "file_magic": dt.file_magic().hex(),
    "format_version": dt.format_version(),
    "library_author": dt.library_author(),
    "author": dt.__author__,
    "expand_path": dt.expand_path("~/models/$DT_TEST_VAR/../x.deathtensors"),
}
res["library_version_is_version"] = dt.library_version() == dt.__version__
res["supported_dtypes"] = dt.supported_dtypes()
res["torch_map"] = {k: str(v) for k, v in dt.TORCH_DTYPE_MAP().items()}
res["dt_map"] = {str(k): v for k, v in dt.DT_DTYPE_MAP().items()}
res["is_error_class"] = issubclass(dt.DeathTensorsError, Exception)

# -- save, save_file, open -------------------------------------------------------
w = np.arange(24, dtype=np.float32).reshape(6, 4)
b = np.array([0.0, -1.5, 2.0], dtype=np.float32)
i = np.arange(5, dtype=np.int64)
t = torch.linspace(-1, 1, 8).reshape(2, 4).to(torch.float16)
dt.save(p("model.deathtensors"), {"w": w, "b": b, "i": i, "t": t}, metadata={"w": {"init": "arange"}},
        global_metadata={"model": "tiny", "license": "MIT"}, checksum=True, compress=False)
dt.save(p("positional.deathtensors"), {"w": w}, None, {"k": "v"}, False, False, 3)
dt.save(p("compressed.deathtensors"), {"w": w, "z": np.zeros(1000, np.float32)}, compress=True, compress_level=5)
dt.save_file(p("raw.dt"), [("x", "F32", [2], np.ones(2, np.float32).tobytes(), {"k": "v"}),
                           ("y", "U8", [3], b"\x01\x02\x03", {})], {"g": "1"}, True, False, 3)

with dt.open(p("model.deathtensors"), verify=True) as f:
    res["keys"] = f.keys()
    res["len"] = len(f)
    res["contains"] = ["w" in f, "nope" in f]
    res["info"] = {k: describe(f, k) for k in f.keys()}
    res["metadata"] = f.metadata()
    res["flags"] = [f.has_checksum(), f.is_compressed(), f.verify()]
    res["w_numpy"] = f.get_tensor("w", framework="numpy").tolist()
    res["w_torch"] = f.get_tensor("w").tolist()
    res["t_torch"] = [str(f.get_tensor("t").dtype), f.get_tensor("t").float().tolist()]
    res["slice_numpy"] = f.get_tensor_slice("w", 2, 3, framework="numpy").tolist()
    res["slice_torch"] = f.get_tensor_slice("w", 4).tolist()
    res["slice_default"] = f.get_tensor_slice("i").tolist()
    res["mmap"] = f.get_tensor_mmap("w").tolist()
    res["all_bytes"] = {k: h(v) for k, v in f.get_all_bytes().items()}
    res["get_tensors"] = {k: v.tolist() for k, v in f.get_tensors(framework="numpy").items() if k != "t"}
    res["bytes"] = [h(f.get_bytes("i")), h(f.get_buffer("i"))]
    fields = ("dtype", "shape", "nbytes", "count", "min", "max", "mean", "stddev", "nnz")
    res["stats"] = {k: round(f.stats("b")[k], 6) if isinstance(f.stats("b")[k], float) else f.stats("b")[k] for k in fields}
    res["all_stats"] = {n: {k: s[k] for k in ("count", "nnz", "min", "max")} for n, s in f.all_stats().items()}
    try:
        f.get_tensor_slice("w", 6)
        res["slice_error"] = None
    except dt.DeathTensorsError:
        res["slice_error"] = "DeathTensorsError"

with dt.open(p("positional.deathtensors")) as f:
    res["positional"] = [f.metadata(), f.has_checksum(), f.is_compressed()]
with dt.open(p("compressed.deathtensors")) as f:
    res["compressed"] = [f.is_compressed(), f.get_tensor("w", framework="numpy").tolist(), h(f.get_bytes("z"))]
with dt.open(p("raw.dt")) as f:
    res["raw"] = [f.keys(), f.metadata(), f.info("x")["metadata"], h(f.get_bytes("y"))]

# -- append ------------------------------------------------------------------------
dt.save(p("appended.deathtensors"), {"a": w}, global_metadata={"v": "1", "keep": "yes"}, checksum=True)
dt.append(p("appended.deathtensors"), {"extra": np.ones(3, np.float32)}, metadata={"extra": {"m": "n"}},
          extra_global_metadata={"v": "2", "appended": "true"})
dt.append_file(p("appended.deathtensors"), [("extra2", "I32", [2], np.array([1, 2], np.int32).tobytes(), {})])
with dt.open(p("appended.deathtensors"), verify=True) as f:
    res["append"] = [f.keys(), f.metadata(), f.info("extra")["metadata"], f.verify(),
                     f.get_tensor("extra2", framework="numpy").tolist()]
try:
    dt.append(p("appended.deathtensors"), {"a": w})
    res["append_duplicate"] = None
except dt.DeathTensorsError:
    res["append_duplicate"] = "DeathTensorsError"

# -- diff ----------------------------------------------------------------------------
dt.save(p("other.deathtensors"), {"w": w * 2, "b": b.reshape(3, 1), "i": i.astype(np.int32), "t": t, "new": b},
        metadata={"w": {"init": "double"}}, global_metadata={"model": "tiny", "license": "MIT"})
res["diff"] = json.loads(json.dumps(dt.diff(p("model.deathtensors"), p("other.deathtensors"))))
res["diff_self"] = dt.diff(p("model.deathtensors"), p("model.deathtensors"))["equal"]

# -- sharded ------------------------------------------------------------------------
layers = {f"layer.{k}.weight": np.full((10, 10), k, np.float32) for k in range(5)}
shards = dt.save_sharded(p("sharded.deathtensors"), layers, max_shard_bytes=900, global_metadata={"model": "s"})
res["shards"] = [os.path.basename(s) for s in shards]
with dt.open_sharded(p("sharded.deathtensors"), verify=True) as r:
    res["sharded"] = {
        "is_reader": isinstance(r, dt.ShardedReader),
        "keys": r.keys(),
        "len": len(r),
        "contains": "layer.3.weight" in r,
        "which": r.which_shard("layer.3.weight"),
        "paths": [os.path.basename(s) for s in r.shard_paths()],
        "info": describe(r, "layer.2.weight"),
        "metadata": r.metadata(),
        "tensor": r.get_tensor("layer.4.weight", framework="numpy").sum().item(),
        "bytes": h(r.get_bytes("layer.1.weight")),
        "stats": r.stats("layer.2.weight")["mean"],
    }
reader = dt.ShardedReader(index_path=p("sharded.deathtensors"))
res["sharded_direct"] = reader.keys() == res["sharded"]["keys"]
reader.close()

# -- sparse ---------------------------------------------------------------------------
sparse = torch.sparse_coo_tensor([[0, 1, 2], [2, 0, 1]], [1.0, 2.0, 3.0], (3, 3), check_invariants=True)
dt.save_sparse(p("sparse.deathtensors"), {"s": sparse, "d": torch.ones(2)}, checksum=True)
with dt.open(p("sparse.deathtensors")) as f:
    res["sparse"] = [sorted(f.keys()), dt.get_sparse(f, "s").to_dense().tolist(), dt.get_sparse(f, "d").tolist(),
                     f.info("s.values")["metadata"]]

# -- Schema ---------------------------------------------------------------------------
schema = dt.Schema()
schema.expect("w", dtype="F32", shape=[6, 4], metadata_keys=["init"]).expect("b", dtype="F32")
schema.allow_extra()
schema.validate(p("model.deathtensors"))
with dt.open(p("model.deathtensors")) as f:
    schema.validate(f)
failures = []
for bad in (dt.Schema().expect("w", dtype="F16").allow_extra(), dt.Schema().expect("w"),
            dt.Schema().expect("w", shape=[4, 6]).allow_extra(), dt.Schema().expect("gone").allow_extra(),
            dt.Schema().expect("b", metadata_keys=["init"]).allow_extra()):
    try:
        bad.validate(p("model.deathtensors"))
        failures.append(None)
    except dt.DeathTensorsError:
        failures.append("DeathTensorsError")
res["schema"] = failures

# -- manifests ------------------------------------------------------------------------
m_path = dt.write_manifest(p("model.deathtensors"))
m = dt.read_manifest(m_path)
res["manifest"] = [os.path.basename(m_path), m["format_version"], m["magic"], m["global_metadata"],
                   {k: {f: v[f] for f in ("dtype", "shape", "nbytes", "metadata")} for k, v in m["tensors"].items()}]
res["manifest_named"] = os.path.basename(dt.write_manifest(p("model.deathtensors"), p("named.json")))

# -- conversions ----------------------------------------------------------------------
from safetensors.torch import load_file, save_file  # noqa: E402

save_file({"a": torch.arange(4, dtype=torch.float32), "b": torch.ones(2, 2)}, p("st.safetensors"))
converted = dt.from_safetensors(p("st.safetensors"))
with dt.open(converted, verify=True) as f:
    res["from_safetensors"] = [os.path.basename(converted), sorted(f.keys()), f.has_checksum(),
                               f.metadata()["deathtensors.converted_from"], f.get_tensor("a").tolist()]
back = dt.to_safetensors(p("model.deathtensors"), p("back.safetensors"))
res["to_safetensors"] = [os.path.basename(back), {k: v.tolist() for k, v in load_file(back).items() if k != "t"}]

# -- the CLI entry point --------------------------------------------------------------
res["main"] = dt.main(["list", p("model.deathtensors")])

print("\n" + json.dumps(res))
