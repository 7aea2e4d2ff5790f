"""Shared fixtures: the repository's test data and its manifest."""

import hashlib
import json
import pathlib

import pytest

TESTDATA = pathlib.Path(__file__).resolve().parents[3] / "testdata"


@pytest.fixture(scope="session")
def manifest():
    return json.loads((TESTDATA / "valid" / "manifest.json").read_text())


def sha256(data) -> str:
    return hashlib.sha256(bytes(data)).hexdigest()


def mappings_of(path) -> int:
    """How many mappings of `path` this process has (Linux's /proc/self/maps)."""
    with open("/proc/self/maps") as f:
        return sum(line.rstrip().endswith(str(path)) for line in f)

