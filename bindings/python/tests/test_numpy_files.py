"""numpy's .npy and .npz files read without numpy's loader and without
pickle (docs/PICKLE.md, "numpy files"): every array equal to np.load's bit
for bit (C and Fortran order, big-endian, 0-d and empty, stored and
deflated members), through dt.open and the command line; object arrays
and malformed archives refused with an error naming what is wrong."""

import json
import struct
import subprocess
import sys
import zipfile
import zlib

import pytest

import deathtensors as dt
from deathtensors.errors import DeathTensorsError

np = pytest.importorskip("numpy")

# complex128 has no safetensors dtype: refused, naming it (below).
DTYPES = ["<f4", "<f8", "<f2", "<i1", "<i2", "<i4", "<i8", "|u1", "<u2", "<u4", "<u8", "|b1", "<c8"]


def arrays():
    rng = np.random.default_rng(7)
    out = {}
    for d in DTYPES:
        base = (rng.standard_normal(24) * 100).astype(np.dtype(d).newbyteorder("="))
        out["c_" + d[1:]] = base.reshape(2, 3, 4)
        out["f_" + d[1:]] = np.asfortranarray(base.reshape(4, 6))
        out["be_" + d[1:]] = base.reshape(6, 4).astype(np.dtype(d).newbyteorder(">"))
    floats = np.array([np.nan, -0.0, 5e-324, np.inf, -np.inf, 1.0], dtype="<f8")
    floats.view("<u8")[0] |= 0x1234  # a NaN payload
    out["special"] = floats
    out["scalar"] = np.array(3.5, dtype="<f4")
    out["empty"] = np.zeros((0, 5), dtype="<i4")
    return out


def same_bits(got, want):
    want = np.asarray(want, order="C").astype(want.dtype.newbyteorder("<"))
    return got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()


@pytest.mark.parametrize("kind", ["npy", "savez", "savez_compressed"])
def test_every_array_reads_as_np_load_reads_it(tmp_path, kind):
    data = arrays()
    if kind == "npy":
        files = {}
        for name, a in data.items():
            np.save(tmp_path / f"{name}.npy", a)
            files[name] = tmp_path / f"{name}.npy"
        for name, path in files.items():
            with dt.open(path) as f:
                assert f.keys() == [name]
                assert same_bits(f.get_tensor(name, framework="numpy"), np.load(path)), name
        return
    path = tmp_path / f"{kind}.npz"
    getattr(np, kind)(path, **data)
    want = np.load(path)
    with dt.open(path) as f:
        assert sorted(f.keys()) == sorted(data)
        for name in data:
            assert same_bits(f.get_tensor(name, framework="numpy"), want[name]), name


def cli(*args):
    return subprocess.run([sys.executable, "-m", "deathtensors", *map(str, args)], capture_output=True, text=True)


def test_the_command_line_converts_and_inspects_npz(tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    data = arrays()
    path = tmp_path / "model.npz"
    np.savez_compressed(path, **data)
    r = cli("convert", path, tmp_path / "model.safetensors")
    assert r.returncode == 0, r.stderr
    loaded = safetensors_numpy.load_file(str(tmp_path / "model.safetensors"))
    for name, a in data.items():
        assert same_bits(loaded[name], a), name
    r = cli("inspect", path)
    assert r.returncode == 0 and "numpy .npy/.npz, read without numpy" in r.stdout, r.stdout + r.stderr
    r = cli("cat", path, "f_i4", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["values"] == data["f_i4"].tolist()


def refused(path, *says):
    with pytest.raises(DeathTensorsError) as e:
        with dt.open(path) as f:
            for name in f.keys():
                f.get_tensor(name, framework="numpy")
    for s in says:
        assert s in str(e.value), str(e.value)
    assert str(path.name) in str(e.value)
    # stats reads every array: the same refusal, as an invalid file.
    r = cli("stats", path)
    assert r.returncode == 1, r.stdout + r.stderr


def test_object_arrays_are_refused_without_unpickling(tmp_path):
    marker = tmp_path / "ran"
    # An object array whose pickle would create a file if loaded.
    payload = np.array([None, None], dtype=object)
    np.save(tmp_path / "obj.npy", payload, allow_pickle=True)
    refused(tmp_path / "obj.npy", "an object array")
    np.savez(tmp_path / "obj.npz", w=np.ones(3), o=payload)
    refused(tmp_path / "obj.npz", "an object array")
    assert not marker.exists()


def test_complex128_is_refused_naming_it(tmp_path):
    np.save(tmp_path / "z.npy", np.ones(3, dtype="<c16"))
    refused(tmp_path / "z.npy", "C128")


def npy_bytes(header: str, data: bytes = b"") -> bytes:
    h = header.encode()
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h + data


def test_malformed_files_are_refused_naming_what_is_wrong(tmp_path):
    cases = {
        "code.npy": (npy_bytes("{'descr': __import__('os').system('x'), 'fortran_order': False, 'shape': (1,)}"),
                     "other than a literal"),
        "short.npy": (npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }\n", b"\0" * 8),
                      "needs 16 bytes of data, the file holds 8"),
        "huge.npy": (npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776,), }\n"),
                     "needs 4398046511104 bytes"),
        "record.npy": (npy_bytes("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }\n", b"\0" * 4),
                       "structured"),
        "text.npy": (npy_bytes("{'descr': '<U3', 'fortran_order': False, 'shape': (1,), }\n", b"\0" * 12), "strings"),
    }
    for name, (content, says) in cases.items():
        (tmp_path / name).write_bytes(content)
        refused(tmp_path / name, says)


def test_npz_tricks_are_refused(tmp_path):
    good = npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }\n", struct.pack("<2f", 1, 2))
    # Two members of one name.
    dup = tmp_path / "dup.npz"
    with zipfile.ZipFile(dup, "w") as z:
        z.writestr("a.npy", good)
        with pytest.warns(UserWarning):
            z.writestr("a.npy", good)
    refused(dup, "named twice")
    # A path outside the archive.
    evil = tmp_path / "evil.npz"
    with zipfile.ZipFile(evil, "w") as z:
        z.writestr("../a.npy", good)
    refused(evil, "not a plain relative path")
    # A member that is not an array.
    other = tmp_path / "other.npz"
    with zipfile.ZipFile(other, "w") as z:
        z.writestr("a.npy", good)
        z.writestr("notes.txt", b"hello")
    refused(other, "is not an array")
    # A stored member with a flipped data byte under its CRC.
    flipped = tmp_path / "flipped.npz"
    with zipfile.ZipFile(flipped, "w") as z:
        z.writestr("a.npy", good)
    raw = bytearray(flipped.read_bytes())
    raw[raw.index(struct.pack("<2f", 1, 2)) + 3] ^= 1
    flipped.write_bytes(bytes(raw))
    refused(flipped, "does not match its CRC-32")


def test_a_deflate_bomb_inflates_no_more_than_the_array_needs(tmp_path):
    """A member whose directory size matches its header's array (16 bytes
    of data) but whose deflate stream inflates to 256 MiB: refused after
    inflating at most what the array needs."""
    header = npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }\n")
    bomb = zlib.compressobj(9, zlib.DEFLATED, -15)
    stream = bomb.compress(header + b"\0" * 16) + bomb.compress(b"\0" * (256 << 20)) + bomb.flush()
    size = len(header) + 16
    path = tmp_path / "bomb.npz"
    with zipfile.ZipFile(path, "w") as z:
        info = zipfile.ZipInfo("a.npy")
        info.compress_type = zipfile.ZIP_DEFLATED
        z.writestr(info, b"")
    raw = path.read_bytes()
    # Rewrite the archive by hand: the bomb's stream under honest-looking
    # sizes (the array's), as a hostile writer would.
    name = b"a.npy"
    crc = zlib.crc32(header + b"\0" * 16)
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0, crc, len(stream), size, len(name), 0) + name
    central = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 8, 0, 0, crc, len(stream), size, len(name),
                          0, 0, 0, 0, 0, 0) + name
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(central), len(local) + len(stream), 0)
    path.write_bytes(local + stream + central + end)
    del raw
    refused(path, "inflates to more than")
