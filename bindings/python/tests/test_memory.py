"""Saving does not hold a second copy of the model: peak RSS grows by at
most 10% of the data size (measured in a fresh subprocess)."""

import json
import subprocess
import sys

import pytest

SCRIPT = r"""
import json, resource, sys
import numpy as np
framework, path = sys.argv[1], sys.argv[2]
import deathtensors as dt
mib = 1024
# ~1 GiB in 64 tensors, every page touched so it is resident.
tensors = {f"layer.{i}.weight": np.full((mib // 64) << 18, i, dtype=np.float32) for i in range(64)}
if framework == "torch":
    import torch
    tensors = {k: torch.from_numpy(v).to(torch.bfloat16).reshape(-1, 256) for k, v in tensors.items()}
size = sum(v.nbytes if hasattr(v, "nbytes") else v.numel() * v.element_size() for v in tensors.values())
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
dt.save(path, tensors, durable=False)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"size": size, "before": before, "after": after}))
"""


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_saving_a_large_dict_adds_little_to_peak_rss(tmp_path, framework):
    r = subprocess.run([sys.executable, "-c", SCRIPT, framework, str(tmp_path / "big.dt")],
                       capture_output=True, text=True, check=True)
    m = json.loads(r.stdout)
    grown = m["after"] - m["before"]
    assert m["size"] >= 500 << 20
    assert grown <= 0.10 * m["size"], f"peak RSS grew by {grown >> 20} MiB for {m['size'] >> 20} MiB of data"
    assert (tmp_path / "big.dt").stat().st_size > m["size"]
