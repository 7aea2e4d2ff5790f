"""Every block of README.md runs as written.

Each ```python block runs in a fresh directory of its own, in a fresh
interpreter (as a reader pasting it would). Then the whole README runs as a
reader following it would: every ```python, ```sh and ```console block in
order, in one scratch folder, so that each command finds the inputs that
earlier blocks made (`$ ` lines of a console block each run in bash and
must exit 0). A block is left out only under an HTML comment
`<!-- readme-test: skip: REASON -->` right above it; the ```rust block is
a doc test of deathtensors-format.

A block that imports a package that is not installed (torch, numpy, ...) is
skipped, naming the package. A block reading ``http://127.0.0.1:8000/``
runs against a loopback HTTP server that honours Range requests, serving
the directory after the README's first block has run in it (the examples
say which file they read). This file needs no package but pytest, so that
it runs in a venv holding only the wheel.
"""

from __future__ import annotations

import ast
import http.server
import importlib.util
import os
import pathlib
import re
import subprocess
import sys
import threading

import pytest

README = pathlib.Path(__file__).resolve().parents[3] / "README.md"
SERVED = "http://127.0.0.1:8000/"
# Packages whose absence skips a block: the optional extras and frameworks.
OPTIONAL = {"torch", "numpy", "ml_dtypes", "jax", "tensorflow", "paddle", "mlx"}


SKIP = re.compile(r"<!-- readme-test: skip: (.+?) -->")


def all_blocks(text: str) -> list[tuple[int, str, str, str | None]]:
    """(line number, language, source, reason to skip or None) of every
    fenced block of `text`."""
    blocks, lines, start, lang = [], text.splitlines(), None, ""
    for i, line in enumerate(lines, 1):
        if start is None and line.startswith("```"):
            start, lang = i, line.strip()[3:]
        elif start is not None and line.strip() == "```":
            above = lines[start - 2] if start >= 2 else ""
            skip = SKIP.fullmatch(above.strip())
            blocks.append((start, lang, "\n".join(lines[start:i - 1]) + "\n", skip.group(1) if skip else None))
            start = None
    assert start is None, f"README.md: the block at line {start} is never closed"
    return blocks


ALL_BLOCKS = all_blocks(README.read_text(encoding="utf-8"))
BLOCKS = [(line, source) for line, lang, source, _ in ALL_BLOCKS if lang == "python"]


def needs(source: str) -> set[str]:
    """The optional packages a block imports."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    if "deathtensors.distributed" in source:
        found.add("torch")  # it is torch.distributed.checkpoint's storage
    return found & OPTIONAL


def missing(source: str) -> list[str]:
    return sorted(p for p in needs(source) if importlib.util.find_spec(p) is None)


class RangeHandler(http.server.SimpleHTTPRequestHandler):
    """Files of a directory, with single byte ranges (206) as object stores
    and nginx serve them; `python -m http.server` ignores Range."""

    def log_message(self, *args):
        pass

    def send_head(self):
        rng = self.headers.get("Range")
        path = pathlib.Path(self.translate_path(self.path))
        if not rng or not path.is_file():
            return super().send_head()
        m = re.fullmatch(r"bytes=(\d*)-(\d*)", rng.strip())
        size = path.stat().st_size
        if not m or not (m.group(1) or m.group(2)):
            self.send_error(416)
            return None
        if m.group(1):
            start = int(m.group(1))
            end = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
        else:
            start, end = max(size - int(m.group(2)), 0), size - 1
        if start >= size or start > end:
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{size}")
            self.end_headers()
            return None
        f = open(path, "rb")  # noqa: SIM115 -- copyfile reads it, the caller closes it
        f.seek(start)
        self.send_response(206)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("ETag", f'"{path.stat().st_mtime_ns:x}-{size:x}"')
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        self._left = end - start + 1
        return f

    def copyfile(self, source, outputfile):
        left = getattr(self, "_left", None)
        if left is None:
            return super().copyfile(source, outputfile)
        while left:
            chunk = source.read(min(left, 1 << 16))
            if not chunk:
                break
            outputfile.write(chunk)
            left -= len(chunk)


def reader_env() -> dict[str, str]:
    """A reader's environment: this interpreter's `python` and `deathtensors`
    first on PATH, and none of the test run's own settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEATHTENSORS_")}
    env["PATH"] = os.pathsep.join([str(pathlib.Path(sys.executable).parent), env.get("PATH", "")])
    return env


def run(source: str, cwd: pathlib.Path) -> None:
    script = cwd / "example.py"
    script.write_text(source, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)], cwd=cwd, env=reader_env(), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"exit {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"


def run_shell(line: int, source: str, cwd: pathlib.Path) -> None:
    done = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", source], cwd=cwd, env=reader_env(), capture_output=True, text=True,
        timeout=600,
    )
    assert done.returncode == 0, (
        f"README.md line {line}: exit {done.returncode}\n$ {source}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    )


def console_commands(source: str) -> list[str]:
    """The `$ ` lines of a console block, prompt removed."""
    return [line[2:] for line in source.splitlines() if line.startswith("$ ")]


class Served:
    """The HTTP server of the examples: `directory` on a loopback port."""

    def __init__(self, directory: pathlib.Path):
        handler = lambda *a, **k: RangeHandler(*a, directory=str(directory), **k)  # noqa: E731
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, source: str) -> str:
        return source.replace(SERVED, f"http://127.0.0.1:{self.server.server_address[1]}/")

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def test_the_readme_has_python_examples():
    assert len(BLOCKS) >= 5
    # The first save/load example comes early.
    assert BLOCKS[0][0] <= 60, f"the first python example is at line {BLOCKS[0][0]}"


@pytest.mark.parametrize("line,source", BLOCKS, ids=[f"line{line}" for line, _ in BLOCKS])
def test_readme_example_runs(line, source, tmp_path):
    setup = [BLOCKS[0][1]] if SERVED in source else []
    absent = sorted({p for s in [*setup, source] for p in missing(s)})
    if absent:
        pytest.skip(f"README.md line {line} needs {', '.join(absent)}, which is not installed")
    for s in setup:
        run(s, tmp_path)
    if not setup:
        run(source, tmp_path)
        return
    with Served(tmp_path) as served:
        run(served.url(source), tmp_path)


def test_every_block_is_run_or_says_why_not():
    langs = {lang for _, lang, _, _ in ALL_BLOCKS}
    assert langs <= {"python", "sh", "console", "rust"}, f"README.md has blocks this test cannot run: {langs}"
    assert any(lang == "console" for _, lang, _, _ in ALL_BLOCKS)
    for line, lang, source, skip in ALL_BLOCKS:
        if lang == "console":
            assert console_commands(source), f"README.md line {line}: a console block with no `$ ` command"
        if lang == "rust":
            # The doc test of deathtensors-format includes README.md.
            assert "fn main()" in source, f"README.md line {line}: the rust block is not a whole program"


def test_the_readme_runs_in_order_as_a_reader_follows_it(tmp_path):
    """Every block in order in one folder: the command line's examples work
    on the files the Python examples made."""
    absent = sorted({p for _, lang, source, skip in ALL_BLOCKS if lang == "python" and not skip for p in missing(source)})
    if absent:
        pytest.skip(f"README.md's examples need {', '.join(absent)}, which is not installed")
    skipped = []
    with Served(tmp_path) as served:
        for line, lang, source, skip in ALL_BLOCKS:
            if skip:
                skipped.append(f"line {line}: {skip}")
            elif lang == "python":
                run(served.url(source), tmp_path)
            elif lang == "sh":
                run_shell(line, source, tmp_path)
            elif lang == "console":
                for command in console_commands(source):
                    run_shell(line, command, tmp_path)
    # Only the blocks that cannot run in a test (a clone from the network,
    # the developers' own commands) are left out, each saying why.
    assert len(skipped) <= 2, skipped
