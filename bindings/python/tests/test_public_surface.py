"""The top-level namespace: ``__all__`` lists today's API, then deathtensors
0.3.0's names in a list of their own; each of those is importable and has a
row in docs/MIGRATING.md giving today's way."""

import ast
import pathlib
import re

import deathtensors as dt

ROOT = pathlib.Path(__file__).resolve().parents[3]
INIT = ROOT / "bindings/python/py_src/deathtensors/__init__.py"
MIGRATING = ROOT / "docs/MIGRATING.md"


def _all_lists():
    """The names of ``__all__ = [...]`` (today's) and of ``__all__ += [...]``
    (0.3.0's), read from ``__init__.py``."""
    today, legacy = None, None
    for node in ast.parse(INIT.read_text()).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["__all__"]:
            today = ast.literal_eval(node.value)
        elif isinstance(node, ast.AugAssign) and getattr(node.target, "id", None) == "__all__":
            assert legacy is None, "one list of 0.3.0 names"
            legacy = ast.literal_eval(node.value)
    assert today and legacy
    return today, legacy


def _migrating_rows():
    text = MIGRATING.read_text()
    section = text.split("## Every 0.3.0 name, and today's way", 1)[1].split("\n## ", 1)[0]
    return {m.group(1) for m in re.finditer(r"^\| `([A-Za-z_]+)(?:\([^`]*\))?` \|", section, re.M)}


def test_all_is_todays_api_then_030s_names():
    today, legacy = _all_lists()
    assert dt.__all__ == today + legacy
    assert len(set(dt.__all__)) == len(dt.__all__), "a name listed twice"
    assert not set(today) & set(legacy)
    for name in dt.__all__:
        assert hasattr(dt, name), name
    # 0.3.0's names stay importable from the top level.
    ns = {}
    exec(f"from deathtensors import {', '.join(legacy)}", ns)  # noqa: S102 - names from __init__.py
    assert all(n in ns for n in legacy)


def test_every_030_name_has_a_row_in_migrating():
    _, legacy = _all_lists()
    rows = _migrating_rows()
    assert rows == set(legacy), f"missing from MIGRATING.md: {set(legacy) - rows}; not 0.3.0 names: {rows - set(legacy)}"
