"""Makes the torch pickle checkpoints of this folder (run with torch
installed: `python testdata/torch/make.py`). Small files the Rust tests of
`deathtensors scan` and `convert` read without torch; the Python suite
makes its own larger corpus (tests/pickle_corpus.py).

- views.pt: torch.save (zip, protocol 2) of {"a": arange(6.).reshape(2, 3),
  "t": a transposed view of it (its own strides, same storage),
  "b": bfloat16 [1, 2], "step": 7, "name": "run"};
- legacy.pt: the same values in the legacy (non-zip) format;
- os-system.pt: the same container with a data.pkl that calls
  os.system("true") (never run by deathtensors; torch.load(weights_only=
  False) would run it).
"""

import os
import zipfile

import torch

here = os.path.dirname(os.path.abspath(__file__))
a = torch.arange(6.0).reshape(2, 3)
values = {"a": a, "t": a.t(), "b": torch.tensor([1.0, 2.0], dtype=torch.bfloat16), "step": 7, "name": "run"}
torch.save(values, os.path.join(here, "views.pt"))
torch.save(values, os.path.join(here, "legacy.pt"), _use_new_zipfile_serialization=False)
with zipfile.ZipFile(os.path.join(here, "os-system.pt"), "w", zipfile.ZIP_STORED) as z:
    z.writestr("archive/data.pkl", b"\x80\x02cos\nsystem\nX\x04\x00\x00\x00true\x85R.")
    z.writestr("archive/version", b"3\n")
