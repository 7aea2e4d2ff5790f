"""Children that tests start die with the pytest run that started them:
when it is terminated (SIGTERM), interrupted twice (Ctrl-C), or ends with
a child left running, with and without pytest-xdist workers."""

import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

HERE = pathlib.Path(__file__).resolve().parent

INNER = '''
import os, subprocess, sys, time
def test_starts_children_and_waits():
    plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    # A child in a session of its own, with a grandchild of its own.
    grouped = subprocess.Popen(
        [sys.executable, "-c",
         "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); time.sleep(600)"],
        start_new_session=True)
    time.sleep(1)
    with open(os.environ["PIDS"], "w") as f:
        f.write(f"{plain.pid} {grouped.pid}")
    if os.environ.get("END") == "leave":
        return
    time.sleep(600)
'''


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead too (its parent has not reaped it yet).
    try:
        return pathlib.Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def session_members(pgid: int) -> list[int]:
    out = []
    for d in pathlib.Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().split(") ")[1].split()
            except (FileNotFoundError, IndexError):
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                out.append(int(d.name))
    return out


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
@pytest.mark.parametrize("workers", [None, "1"], ids=["one process", "xdist worker"])
@pytest.mark.parametrize("end", ["sigterm", "two ctrl-c", "leave"])
def test_children_of_a_run_die_with_it(tmp_path, workers, end):
    (tmp_path / "test_inner.py").write_text(INNER)
    pids_file = tmp_path / "pids"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "reaper", "--rootdir", str(tmp_path),
           str(tmp_path / "test_inner.py")]
    if workers:
        cmd += ["-n", workers]
    env = dict(os.environ, PIDS=str(pids_file), END=end, PYTHONPATH=str(HERE))
    # Its output goes to a file, never a pipe nobody reads until the end
    # (a full pipe would block the run being tested).
    log = tmp_path / "inner.log"
    out = open(log, "wb")  # noqa: SIM115 -- closed below
    # Ctrl-C as a terminal delivers it: SIGINT's default action restored
    # in the run (a run started in the background, as CI may start this
    # one, inherits SIGINT ignored, and Python then never raises
    # KeyboardInterrupt).
    run = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 60
        while not (pids_file.exists() and pids_file.read_text().strip()) and time.monotonic() < deadline:
            assert run.poll() is None or end == "leave", log.read_text(errors="replace")
            time.sleep(0.1)
        plain, grouped = map(int, pids_file.read_text().split())
        grandchildren = [p for p in session_members(grouped) if p != grouped]
        assert alive(plain) and alive(grouped) and grandchildren, "the inner test's children did not start"
        if end == "sigterm":
            run.send_signal(signal.SIGTERM)
        elif end == "two ctrl-c":
            # Ctrl-C reaches the terminal's whole foreground group.
            os.killpg(run.pid, signal.SIGINT)
            time.sleep(1)
            os.killpg(run.pid, signal.SIGINT)
        try:
            run.wait(90)
        except subprocess.TimeoutExpired:
            os.killpg(run.pid, signal.SIGKILL)
            raise AssertionError(f"pytest did not end ({end}):\n{log.read_text(errors='replace')[-3000:]}") from None
        deadline = time.monotonic() + 10
        while any(map(alive, [plain, grouped, *grandchildren])) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = [p for p in (plain, grouped, *grandchildren) if alive(p)]
        assert not left, f"pytest ended ({end}, exit {run.returncode}) and left children running: {left}"
    finally:
        out.close()
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
        for p in session_members(run.pid):
            os.kill(p, signal.SIGKILL)
