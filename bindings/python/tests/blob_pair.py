"""What the TensorBlob tests share (test_blob.py, test_blob_migration.py,
test_blob_processes.py): the two implementations side by side, and rows
that encode their index."""

import pytest

import deathtensors as dt

tensorblob = pytest.importorskip("tensorblob")
torch = pytest.importorskip("torch")

TB = tensorblob.TensorBlob
DT = dt.TensorBlob

# Every mode tensorblob opens with.
MODES = ["r", "w", "a", "r+", "w+", "a+"]


def rows(start, count, width=2):
    """int64 rows that encode their index: row i is [i, -i, 7i, ...]."""
    i = torch.arange(start, start + count, dtype=torch.int64)[:, None]
    return i * torch.tensor([1, -1, 7, 3, -5][:width])


# --- comparing both implementations ---------------------------------------


def attempt(f):
    try:
        return True, f()
    except Exception as e:  # noqa: BLE001 - the exception is the answer
        return False, e


def assert_same_value(theirs, ours, what):
    if isinstance(theirs, torch.Tensor):
        assert isinstance(ours, torch.Tensor), f"{what}: {type(ours).__name__} is not a tensor"
        assert (ours.dtype, tuple(ours.shape)) == (theirs.dtype, tuple(theirs.shape)), what
        assert torch.equal(ours, theirs), f"{what}: {ours} != {theirs}"
    elif isinstance(theirs, (list, tuple)):
        assert type(ours) is type(theirs) and len(ours) == len(theirs), f"{what}: {ours!r} != {theirs!r}"
        for k, (t, o) in enumerate(zip(theirs, ours)):
            assert_same_value(t, o, f"{what}[{k}]")
    else:
        assert ours == theirs, f"{what}: {ours!r} != {theirs!r}"


def agree(f_theirs, f_ours, what=""):
    """Runs tensorblob's call, then ours; both return equal values, or ours
    raises an instance of the exception type tensorblob raises."""
    (ok_t, t), (ok_o, o) = attempt(f_theirs), attempt(f_ours)
    if not ok_t:
        assert not ok_o, f"{what}: tensorblob raised {type(t).__name__}({t}), deathtensors returned {o!r}"
        assert isinstance(o, type(t)), (
            f"{what}: tensorblob raised {type(t).__name__}({t}), deathtensors {type(o).__name__}({o})"
        )
        return o
    assert ok_o, f"{what}: tensorblob returned {t!r}, deathtensors raised {type(o).__name__}({o})"
    assert_same_value(t, o, what)
    return o


class Pair:
    """The same blob twice, in tensorblob (`<name>.tb`) and in deathtensors
    (`<name>.dt`): `pair(f)` calls `f` on both, and they must agree."""

    def __init__(self, root, name="blob"):
        self.paths = (root / f"{name}.tb", root / f"{name}.dt")
        self.blobs = None

    def open(self, mode, **kw):
        self.blobs = (TB.open(self.paths[0], mode, **kw), DT.open(self.paths[1], mode, **kw))
        return self

    def __call__(self, f, what=""):
        return agree(lambda: f(self.blobs[0]), lambda: f(self.blobs[1]), what)

    def close(self):
        for b in self.blobs:
            b.close()


def made(root, n=7, block_size=3, name="blob"):
    """A closed pair holding `rows(0, n)` of int64 (2,)."""
    p = Pair(root, name).open("w", dtype=torch.int64, shape=(2,), block_size=block_size)
    p(lambda b: b.write(rows(0, n)))
    p.close()
    return p


def bits(t):
    """The raw bytes of a tensor (NaNs compare equal)."""
    return t.contiguous().reshape(-1).view(torch.uint8)
