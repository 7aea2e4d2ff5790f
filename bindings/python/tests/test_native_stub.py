"""``_native.pyi`` (written by hand) matches the built ``_native`` module: the
same functions, classes, methods and properties, and the same parameter
names, in both directions, and each parameter's type against the Rust
signature it stubs (read from bindings/python/src). A function added to,
renamed in or removed from the Rust bindings without its stub, or a
parameter whose type changed on one side only, fails here."""

import ast
import inspect
import pathlib
import re
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
    # The class's own members: an exception class's `args`, `errno` and the
    # like are its builtin base's.
    public = {n for n in vars(native) if not n.startswith("_")}
    assert sorted(public - stubbed) == [], f"{cls.name}: in _native, missing from _native.pyi"


# -- types: the stub's annotations against the Rust signatures ---------------
#
# The Rust sources are read as text (bindings/python/src): each
# `#[pyfunction]` and each method of a `#[pymethods]` block, its parameters'
# Rust types. A Rust type says what Python values pyo3 takes for it; the
# stub's annotation must take the same kind (an int for `u64`, a str for
# `&str`, a path for `PathBuf`, None exactly where the Rust type is an
# `Option` or its default is None, the pyclass by its Python name). Types
# that take any object (`Bound<PyAny>`) check nothing.

SRC = pathlib.Path(__file__).resolve().parents[1] / "src"

_INTS = {"u8", "u16", "u32", "u64", "usize", "i8", "i16", "i32", "i64", "isize", "c_int"}


def _split_top(s: str) -> list:
    out, depth, cur = [], 0, ""
    for ch in s:
        depth += ch in "<([{"
        depth -= ch in ">)]}"
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [x.strip() for x in out if x.strip()]


def _rust_items():
    """(classes: Rust struct -> Python name, [(qualified name, [(param, Rust type, default)])])."""
    texts = [re.sub(r"//[^\n]*", "", f.read_text(encoding="utf-8")) for f in sorted(SRC.glob("*.rs"))]
    classes = {}
    for text in texts:
        for m in re.finditer(r"#\[pyclass\(([^)]*)\)\]\s*(?:#\[[^\]]*\]\s*)*pub(?:\([^)]*\))?\s+struct\s+(\w+)", text):
            name = re.search(r'name\s*=\s*"(\w+)"', m.group(1))
            classes[m.group(2)] = name.group(1) if name else m.group(2)
    items = []
    for text in texts:
        blocks = []
        for m in re.finditer(r"#\[pymethods\]\s*impl\s+(\w+)\s*\{", text):
            depth, i = 1, m.end()
            while depth:
                depth += (text[i] == "{") - (text[i] == "}")
                i += 1
            blocks.append((classes.get(m.group(1), m.group(1)), m.end(), i))
        fns = r"((?:#\[[^\n]*\]\s*)*)(?:pub(?:\([^)]*\))?\s+)?(?:unsafe\s+)?fn\s+(\w+)\s*(?:<[^>]*>)?\s*\("
        for m in re.finditer(fns, text):
            attrs, name = m.group(1), m.group(2)
            owner = next((b[0] for b in blocks if b[1] <= m.start() < b[2]), None)
            if owner is None and "#[pyfunction]" not in attrs:
                continue
            if "#[getter]" in attrs or "#[setter]" in attrs:
                continue
            depth, j = 1, m.end()
            while depth:
                depth += (text[j] == "(") - (text[j] == ")")
                j += 1
            defaults = {}
            sig = re.search(r"signature\s*=\s*\((.*)\)\s*\)\]", attrs, re.S)
            for p in _split_top(sig.group(1)) if sig else []:
                if "=" in p:
                    k, v = p.split("=", 1)
                    defaults[k.strip()] = v.strip()
            renamed = re.search(r'pyo3\([^)]*\bname\s*=\s*"(\w+)"', attrs)
            pyname = "__init__" if "#[new]" in attrs else renamed.group(1) if renamed else name
            params = []
            for p in _split_top(text[m.end():j - 1]):
                if ":" not in p:
                    continue  # self
                pname, ty = (x.strip() for x in p.split(":", 1))
                pname = pname.removeprefix("mut ").strip()
                if pname in ("slf", "self") or ty.startswith("Python<") or "Self>" in ty:
                    continue
                params.append((pname, ty, defaults.get(pname)))
            items.append((f"{owner}.{pyname}" if owner else pyname, params))
    return classes, items


def _rust_kind(ty: str, classes: dict):
    """(optional, kind) of a Rust parameter type: kind is a set of the
    Python kinds it takes, or None for any object."""
    ty = re.sub(r"'\w+", "", ty).replace("&", "").replace("mut ", "").replace(" ", "")
    optional = ty.startswith("Option<")
    if optional:
        ty = ty[len("Option<"):-1]
    base = re.sub(r"^(std::path::|std::ffi::|pyo3::ffi::|deathtensors_io::format::|crate::\w+::)", "", ty)
    head = base.split("<", 1)[0]
    if head in _INTS:
        return optional, {"int"}
    kinds = {
        "f64": {"float"}, "f32": {"float"}, "bool": {"bool"}, "str": {"str"}, "String": {"str"},
        "PathBuf": {"path"}, "OsString": {"path"}, "[u8]": {"bytes"}, "Vec<u8>": {"bytes"}, "[u8;32]": {"bytes"},
        "Metadata": {"map"}, "BTreeMap": {"map"}, "HashMap": {"map"}, "StorageOptions": {"map"},
        "BTreeSet": {"seq"}, "Vec": {"seq"}, "ChecksumMode": {"bool", "str"}, "Level": {"int", "str"},
        "CompressMode": {"bool", "str"},
    }
    if base in ("ChecksumMode", "CompressMode"):
        return True, kinds[base]  # None, a bool or a name (options.rs's FromPyObject)
    if base in kinds:
        return optional, kinds[base]
    if head in kinds:
        return optional, kinds[head]
    if base.startswith("("):
        return optional, {"tuple"}
    inner = re.sub(r"^(Bound|PyRef|Py)<_?,?", "", base).rstrip(">")
    inner = re.sub(r"^crate::\w+::", "", inner)
    if inner in classes:
        return optional, {classes[inner]}
    if inner == "PyDict":
        return optional, {"map"}
    return optional, None  # PyAny and arguments pyo3 converts by hand


def _stub_kind(ann):
    """(optional, kinds) of a stub annotation."""
    if ann is None:
        return False, None
    text = ast.unparse(ann)
    optional = text.startswith("Optional[") or re.search(r"(^|\|)\s*None\s*($|\|)", text) is not None
    words = set(re.findall(r"[A-Za-z_][\w.]*", text))
    if "Any" in words or any(w.startswith("_") for w in words):
        return optional, None
    kinds = set()
    for w in words:
        kinds |= {
            "int": {"int"}, "float": {"float", "int"}, "bool": {"bool"}, "str": {"str", "path"}, "bytes": {"bytes"},
            "os.PathLike": {"path"}, "dict": {"map"}, "Mapping": {"map"}, "list": {"seq"}, "Sequence": {"seq"},
            "Iterable": {"seq"}, "set": {"seq"}, "tuple": {"tuple", "seq"}, "Tuple": {"tuple", "seq"},
        }.get(w, {w})
    return optional, kinds


def _stub_functions():
    out = {f.name: f for f in FUNCTIONS}
    for c in CLASSES:
        for item in c.body:
            if isinstance(item, ast.FunctionDef):
                out[f"{c.name}.{item.name}"] = item
    return out


def test_the_stubs_types_are_the_rust_signatures():
    classes, items = _rust_items()
    stubs = _stub_functions()
    checked, wrong = 0, []
    for qualname, params in items:
        stub = stubs.get(qualname)
        if stub is None:
            continue  # names are the tests above's
        a = stub.args
        annotated = {p.arg: p.annotation for p in a.posonlyargs + a.args + a.kwonlyargs}
        defaults = dict(zip([p.arg for p in (a.posonlyargs + a.args)][::-1], a.defaults[::-1]))
        defaults |= {p.arg: d for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None}
        for name, ty, default in params:
            r_opt, r_kind = _rust_kind(ty, classes)
            r_opt = r_opt or default == "None"
            s_opt, s_kind = _stub_kind(annotated.get(name))
            if name in defaults and isinstance(defaults[name], ast.Constant) and defaults[name].value is None:
                s_opt = True
            checked += 1
            if r_opt != s_opt and r_kind is not None and s_kind is not None:
                wrong.append(f"{qualname}({name}): Rust {ty!r} {'takes' if r_opt else 'refuses'} None, the stub says {ast.unparse(annotated.get(name))}")
            elif r_kind is not None and s_kind is not None and not r_kind & s_kind:
                wrong.append(f"{qualname}({name}): Rust {ty!r}, the stub says {ast.unparse(annotated[name])}")
    assert checked > 200, f"only {checked} parameters read from {SRC}: the reading of the Rust sources broke"
    assert wrong == [], "\n".join(wrong)
