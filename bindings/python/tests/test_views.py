"""Every save path stores the values the caller sees, whatever view the
value is: torch's conjugate and negative bits, transposes, steps, expanded
(zero-stride) and channels_last tensors; numpy's byte-swapped,
Fortran-ordered, negative-stride and broadcast arrays. What is read back
equals what was passed (with ``resolve_conj()``/``resolve_neg()`` on the
expected side). Values that cannot be written are refused, naming them."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import deathtensors as dt

torch = pytest.importorskip("torch")

import deathtensors.cryptotensors.numpy as ct_numpy  # noqa: E402
import deathtensors.cryptotensors.torch as ct_torch  # noqa: E402
from deathtensors.safetensors import numpy as st_numpy  # noqa: E402
from deathtensors.safetensors import torch as st_torch  # noqa: E402


def _base(draw, dims, dtype):
    shape = draw(st.lists(st.integers(1, 4), min_size=dims, max_size=dims))
    n = int(np.prod(shape))
    seed = draw(st.integers(0, 2**31))
    g = torch.Generator().manual_seed(seed)
    if dtype.is_complex:
        return torch.complex(torch.randn(n, generator=g), torch.randn(n, generator=g)).to(dtype).reshape(shape)
    return (torch.randn(n, generator=g) * 100).to(dtype).reshape(shape)


# name -> strategy of a torch view (each a tensor whose memory is not its values).
TORCH_VIEWS = {
    "conj": lambda d: _base(d, 2, torch.complex64).conj(),
    "neg": lambda d: torch._neg_view(_base(d, 2, torch.float32)),
    "conj_of_neg": lambda d: torch._neg_view(_base(d, 2, torch.complex64)).conj(),
    "conj_imag": lambda d: _base(d, 2, torch.complex64).conj().imag,  # a negative view of real values
    "conj_transposed": lambda d: _base(d, 2, torch.complex64).conj().t(),
    "transposed": lambda d: _base(d, 2, torch.float64).t(),
    "stepped": lambda d: _base(d, 1, torch.int32).repeat(3)[::2],
    "expanded": lambda d: _base(d, 1, torch.float16)[:1].expand(3, 4),
    "channels_last": lambda d: _base(d, 4, torch.bfloat16).contiguous(memory_format=torch.channels_last),
    "offset": lambda d: _base(d, 2, torch.int64).repeat(2, 1)[1:],
    # Rows of a larger tensor (written from where they are, not copied).
    "column_tile": lambda d: _base(d, 2, torch.float32).repeat(1, 3)[:, 1:],
    "inner_tile": lambda d: _base(d, 3, torch.int16).repeat(1, 2, 1)[:, 1:, :],
    "plain": lambda d: _base(d, 2, torch.float32),
}


def _np(draw):
    shape = draw(st.lists(st.integers(1, 4), min_size=2, max_size=2))
    seed = draw(st.integers(0, 2**31))
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


NUMPY_VIEWS = {
    "byteswapped": lambda d: _np(d).astype(">f4"),
    "fortran": lambda d: np.asfortranarray(_np(d)),
    "negative_stride": lambda d: _np(d)[::-1, ::-1],
    "broadcast": lambda d: (lambda a: np.broadcast_to(a[:1], (3, a.shape[1])))(_np(d)),
    "byteswapped_transposed": lambda d: _np(d).astype(">f8").T,
    "plain": lambda d: _np(d),
}

CONTIGUOUS = {"conj", "neg", "conj_of_neg", "plain"}


def _expected(value):
    if isinstance(value, torch.Tensor):
        return value.resolve_conj().resolve_neg().contiguous()
    return np.ascontiguousarray(value, dtype=value.dtype.newbyteorder("="))


def _same(got, value):
    want = _expected(value)
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor) and got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(got, want), (got, want)
    else:
        got = np.asarray(got)
        assert got.shape == want.shape and got.dtype.newbyteorder("=") == want.dtype, (got.dtype, want.dtype)
        assert np.array_equal(got, want)


def _fw(value):
    return "torch" if isinstance(value, torch.Tensor) else "numpy"


# --- the save paths: (tmp_path, value) -> the value read back --------------


def via_save(tmp, v):
    dt.save(tmp / "a.dt", {"x": v})
    with dt.open(tmp / "a.dt") as f:
        return f.get_tensor("x", framework=_fw(v))


def via_save_checksum_compressed(tmp, v):
    dt.save(tmp / "a.dt", {"x": v}, checksum=True, compress=True)
    with dt.open(tmp / "a.dt") as f:
        return f.get_tensor("x", framework=_fw(v), verify=True)


def via_save_encrypted(tmp, v):
    key = dt.generate_key("symmetric", kid="k")
    dt.save(tmp / "a.dt", {"x": v}, encrypt=key)
    with dt.open(tmp / "a.dt", keys=key) as f:
        return f.get_tensors(framework=_fw(v))["x"]


def via_save_sharded(tmp, v):
    dt.save_sharded(tmp / "model", {"x": v, "y": np.zeros(4, np.uint8)}, max_shard_bytes=1)
    with dt.open_sharded(tmp / "model.deathtensors.index.json", verify=True) as f:
        return f.get_tensor("x", framework=_fw(v))


def via_append(tmp, v):
    dt.save(tmp / "a.dt", {"first": np.zeros(2, np.uint8)}, checksum=True)
    dt.append(tmp / "a.dt", {"x": v})
    with dt.open(tmp / "a.dt") as f:
        return f.get_tensor("x", framework=_fw(v))


def via_tensorblob(tmp, v):
    rows = v[None] if isinstance(v, np.ndarray) else v.unsqueeze(0)
    with dt.TensorBlob.open(tmp / "blob", "w", dtype=rows.dtype, shape=tuple(rows.shape[1:]), framework=_fw(v)) as b:
        b.write(rows)
        b.write(rows)
    with dt.TensorBlob.open(tmp / "blob", "r", framework=_fw(v)) as b:
        both = b[:]
    _same(both[1], v)
    return both[0]


_CT_KEYS = {}


def _ct_config():
    """cryptotensors' keys (its JWK dialect), made once."""
    if not _CT_KEYS:
        _CT_KEYS["enc_key"] = dt.generate_key("symmetric", kid="enc", format="cryptotensors")
        _CT_KEYS["sign_key"] = dt.generate_key("ed25519", kid="sign", format="cryptotensors")
    return dict(_CT_KEYS)


def via_cryptotensors(tmp, v):
    module = ct_torch if isinstance(v, torch.Tensor) else ct_numpy
    module.save_file({"x": v}, tmp / "c.safetensors", config=_ct_config())
    return module.load_file(tmp / "c.safetensors", config=_ct_config())["x"]


def via_dropin_file(tmp, v):
    module = st_torch if isinstance(v, torch.Tensor) else st_numpy
    module.save_file({"x": v}, tmp / "s.safetensors")
    return module.load_file(tmp / "s.safetensors")["x"]


def via_dropin_bytes(tmp, v):
    module = st_torch if isinstance(v, torch.Tensor) else st_numpy
    return module.load(module.save({"x": v}))["x"]


PATHS = {
    "save": via_save,
    "save_checksum_compressed": via_save_checksum_compressed,
    "save_encrypted": via_save_encrypted,
    "save_sharded": via_save_sharded,
    "append": via_append,
    "tensorblob": via_tensorblob,
    "cryptotensors": via_cryptotensors,
    "dropin_file": via_dropin_file,
    "dropin_bytes": via_dropin_bytes,
}

# torch's drop-in keeps safetensors' contract: non-contiguous tensors are
# refused, naming them (cryptotensors' API, which writes through our own
# writer, saves their values).
REFUSES_NONCONTIGUOUS_TORCH = {"dropin_file", "dropin_bytes"}


def _check(path, make, tmp_path_factory, data, torch_view):
    value = make(data.draw)
    tmp = tmp_path_factory.mktemp("v")
    if torch_view and path in REFUSES_NONCONTIGUOUS_TORCH and not value.is_contiguous():
        with pytest.raises(ValueError, match="`x`"):
            PATHS[path](tmp, value)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        got = PATHS[path](tmp, value)
    _same(got, value)


# (framework, kind) -> strategy of a view, torch's and numpy's.
VIEWS = {**{("torch", k): v for k, v in TORCH_VIEWS.items()}, **{("numpy", k): v for k, v in NUMPY_VIEWS.items()}}


@pytest.mark.parametrize("view", sorted(VIEWS), ids="-".join)
@pytest.mark.parametrize("path", sorted(PATHS))
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_views_read_back_as_seen(path, view, tmp_path_factory, data):
    _check(path, VIEWS[view], tmp_path_factory, data, view[0] == "torch")


@pytest.mark.parametrize(
    "make,needle",
    [
        (lambda: torch.randn(3).to_sparse(), "sparse"),
        (lambda: torch.empty(3, device="meta"), "meta"),
        (lambda: torch.nested.nested_tensor([torch.randn(2), torch.randn(3)]), "nested"),
        (lambda: torch.quantize_per_tensor(torch.randn(3), 0.1, 0, torch.qint8), "quantized"),
        (lambda: np.array([object(), 1]), "objects"),
    ],
)
def test_unwritable_values_are_refused_naming_the_tensor(tmp_path, make, needle):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        value = make()
    dt.save(tmp_path / "base.dt", {"ok": np.zeros(1, np.uint8)})
    before = (tmp_path / "base.dt").read_bytes()
    saves = {
        "save": lambda: dt.save(tmp_path / "a.dt", {"bad": value}),
        "save_sharded": lambda: dt.save_sharded(tmp_path / "model", {"bad": value}),
        "append": lambda: dt.append(tmp_path / "base.dt", {"bad": value}),
    }
    for name, save in saves.items():
        with pytest.raises(dt.DeathTensorsError, match=rf"tensor 'bad'.*{needle}"):
            save()
    assert (tmp_path / "base.dt").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base.dt"], "a file was left behind"


def test_contiguous_values_are_not_copied():
    from deathtensors import _convert

    t = torch.arange(8.0)
    assert _convert.torch_resolved("t", t) is t or _convert.torch_resolved("t", t).data_ptr() == t.data_ptr()
    a = np.arange(8.0)
    assert np.shares_memory(_convert.numpy_resolved("a", a), a)
    # A view that needs resolving is copied once, into a fresh tensor.
    n = torch._neg_view(t)
    r = _convert.torch_resolved("n", n)
    assert not r.is_neg() and r.is_contiguous() and torch.equal(r, -t)


@pytest.mark.parametrize("kw", [{}, {"checksum": True}, {"format": "safetensors"}, {"compress": True}])
def test_views_of_rows_save_the_file_of_their_contiguous_copy(tmp_path, kw):
    m = torch.arange(300 * 257, dtype=torch.int16).reshape(300, 257)
    views = {"cols": m[:, 100:], "every_third_row": m[::3], "one_col": m[:, 5:6], "cube": m[:294].reshape(6, 49, 257)[:, 1:40]}
    dt.save(tmp_path / "views.dt", views, **kw)
    dt.save(tmp_path / "copies.dt", {k: v.contiguous() for k, v in views.items()}, **kw)
    assert (tmp_path / "views.dt").read_bytes() == (tmp_path / "copies.dt").read_bytes()
