"""Smoke test of an installed deathtensors wheel, with nothing else
installed (no numpy, no torch): run by `cargo xtask dist` in a fresh venv,
on x86_64 natively and on aarch64 under qemu-user.

usage: python wheel_smoke.py TESTDATA_VALID_DIR WORK_DIR VERSION

Every fixture of the manifest is read through the native extension and
checked against the manifest's digests (safetensors, bintensors and
deathtensors 0.3.0 files, whole-blob zstd among them); a file that must be
refused is refused; a file is converted to deathtensors and back, every
tensor exact; the command line verifies a good file and refuses a
flipped byte; a torch pickle checkpoint is scanned, opened (bytes) and
converted without torch or numpy.
"""

import hashlib
import json
import os
import sys


def main() -> None:
    valid, work, version = sys.argv[1:4]
    import deathtensors as dt

    assert dt.__version__ == version, (dt.__version__, version)
    here = os.path.realpath(dt.__file__)
    assert here.startswith(os.path.realpath(sys.prefix)), f"imported {here}, not the venv's ({sys.prefix})"
    for heavy in ("numpy", "torch"):
        assert heavy not in sys.modules, f"importing deathtensors imported {heavy}"

    manifest = json.load(open(os.path.join(valid, "manifest.json")))
    checked = refused = 0
    for rel, entry in sorted(manifest["files"].items()):
        path = os.path.join(valid, rel)
        if entry["outcome"] != "ok":
            try:
                with dt.open(path, verify=True) as f:
                    for name in f.keys():
                        f.get_bytes(name)
            except dt.DeathTensorsError:
                refused += 1
                continue
            raise AssertionError(f"{rel}: read although the manifest says it must fail")
        with dt.open(path) as f:
            assert sorted(f.keys()) == sorted(entry["tensors"]), rel
            for name, t in entry["tensors"].items():
                got = hashlib.sha256(f.get_bytes(name)).hexdigest()
                assert got == t["sha256"], f"{rel}: {name}: sha256 {got}, manifest {t['sha256']}"
                checked += 1
    assert checked > 50 and refused > 0, (checked, refused)

    os.makedirs(work, exist_ok=True)
    src = os.path.join(valid, "safetensors-0.8.0", "all_dtypes.safetensors")
    mid = os.path.join(work, "all_dtypes.dt")
    back = os.path.join(work, "all_dtypes.safetensors")
    dt.from_safetensors(src, mid)
    dt.to_safetensors(mid, back)
    with dt.open(src) as a, dt.open(back) as b:
        assert a.keys() == b.keys(), "safetensors -> deathtensors -> safetensors changed the names or their order"
        for name in a.keys():
            assert a.get_bytes(name) == b.get_bytes(name), f"the round trip changed {name}"
            assert a.info(name)["shape"] == b.info(name)["shape"], name
        assert a.metadata().items() <= b.metadata().items(), "the round trip lost metadata"

    # The command line, in this process (under qemu-user without binfmt a
    # child process could not start): a good file verifies, a flipped byte
    # does not.
    assert dt.main(["verify", mid]) == 0
    flipped = os.path.join(work, "flipped.dt")
    data = bytearray(open(mid, "rb").read())
    data[-40] ^= 0x55
    open(flipped, "wb").write(bytes(data))
    assert dt.main(["verify", flipped]) != 0, "verify accepted a flipped byte"

    # A torch pickle checkpoint with neither torch nor numpy installed:
    # opened (bytes), scanned and converted, nothing of it run.
    torch_dir = os.path.join(os.path.dirname(os.path.abspath(valid)), "torch")
    views = os.path.join(torch_dir, "views.pt")
    assert dt.main(["scan", views]) == 0, "scan refused a plain checkpoint"
    assert dt.main(["scan", os.path.join(torch_dir, "os-system.pt")]) == 1, "scan passed os.system"
    converted = os.path.join(work, "views.safetensors")
    assert dt.main(["convert", views, converted]) == 0
    with dt.open(views) as p, dt.open(converted) as s:
        assert sorted(p.keys()) == sorted(s.keys()) and len(s.keys()) == 3, (p.keys(), s.keys())
        for name in s.keys():
            assert p.get_bytes(name) == s.get_bytes(name), f"views.pt: {name} differs from its conversion"
    for heavy in ("numpy", "torch"):
        assert heavy not in sys.modules, f"reading a torch checkpoint imported {heavy}"
    print(
        f"wheel smoke: {checked} tensors of the fixtures match, {refused} bad files refused, round trip exact, "
        "CLI ok, a torch checkpoint read without torch"
    )


if __name__ == "__main__":
    main()
