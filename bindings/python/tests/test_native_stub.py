"""``_native.pyi`` (written by hand) matches the built ``_native`` module: the
same functions, classes, methods and properties, and the same parameter
names, in both directions. A function added to, renamed in or removed from
the Rust bindings without its stub fails here."""

import ast
import inspect
import pathlib
import sys

import pytest

import deathtensors
from deathtensors import _native

STUB = pathlib.Path(deathtensors.__file__).with_name("_native.pyi")
TREE = ast.parse(STUB.read_text(encoding="utf-8"))


def _stub_params(fn: ast.FunctionDef, method: bool) -> list:
    a = fn.args
    names = [p.arg for p in a.posonlyargs + a.args]
    if method and names and names[0] in ("self", "cls"):
        names = names[1:]
    if a.vararg:
        names.append("*" + a.vararg.arg)
    names += [p.arg for p in a.kwonlyargs]
    if a.kwarg:
        names.append("**" + a.kwarg.arg)
    return names


def _native_params(obj) -> list:
    out = []
    for p in inspect.signature(obj).parameters.values():
        if p.kind is p.VAR_POSITIONAL:
            out.append("*" + p.name)
        elif p.kind is p.VAR_KEYWORD:
            out.append("**" + p.name)
        else:
            out.append(p.name)
    return out


def _is_decorated(fn: ast.FunctionDef, name: str) -> bool:
    return any(isinstance(d, ast.Name) and d.id == name or isinstance(d, ast.Attribute) and d.attr == name
               for d in fn.decorator_list)


FUNCTIONS = [n for n in TREE.body if isinstance(n, ast.FunctionDef)]
CLASSES = [n for n in TREE.body if isinstance(n, ast.ClassDef)]
CONSTANTS = [t.id for n in TREE.body if isinstance(n, (ast.AnnAssign, ast.Assign))
             for t in ([n.target] if isinstance(n, ast.AnnAssign) else n.targets)
             # Names with an underscore are the stub's own type aliases.
             if isinstance(t, ast.Name) and not t.id.startswith("_")]


def test_every_public_name_of_the_module_has_a_stub_and_back():
    stubbed = {n.name for n in FUNCTIONS} | {n.name for n in CLASSES} | set(CONSTANTS)
    public = {n for n in dir(_native) if not n.startswith("_")}
    assert sorted(public - stubbed) == [], "in _native, missing from _native.pyi"
    assert sorted(stubbed - public - {"__version__"}) == [], "in _native.pyi, missing from _native"
    assert isinstance(_native.__version__, str)


@pytest.mark.parametrize("fn", FUNCTIONS, ids=[f.name for f in FUNCTIONS])
def test_functions_take_the_stubs_parameters(fn):
    native = getattr(_native, fn.name)
    assert _native_params(native) == _stub_params(fn, method=False)


@pytest.mark.parametrize("cls", CLASSES, ids=[c.name for c in CLASSES])
def test_classes_have_the_stubs_methods_and_parameters(cls):
    native = getattr(_native, cls.name)
    for item in cls.body:
        if not isinstance(item, ast.FunctionDef):
            continue
        if item.name == "__buffer__" and sys.version_info < (3, 12):
            continue  # the buffer protocol has a Python name from 3.12 on
        assert hasattr(native, item.name), f"{cls.name}.{item.name} is in the stub, not in _native"
        if _is_decorated(item, "property") or _is_decorated(item, "setter"):
            continue
        if item.name.startswith("__") and item.name != "__init__":
            continue  # slots (__len__, __contains__, ...): positional by protocol
        member = inspect.getattr_static(native, item.name)
        if item.name == "__init__":
            member = native
        try:
            params = _native_params(member)
        except (ValueError, TypeError):
            continue  # slot wrappers (__len__, __enter__...) have no signature to compare
        if params and params[0] in ("self", "cls", "$self", "$cls"):
            params = params[1:]
        assert params == _stub_params(item, method=True), f"{cls.name}.{item.name}"
    stubbed = {i.name for i in cls.body if isinstance(i, ast.FunctionDef)}
    stubbed |= {i.target.id for i in cls.body if isinstance(i, ast.AnnAssign) and isinstance(i.target, ast.Name)}
    public = {n for n, _ in inspect.getmembers(native) if not n.startswith("_")}
    assert sorted(public - stubbed) == [], f"{cls.name}: in _native, missing from _native.pyi"
