"""SIGKILL at any instant leaves a TensorBlob exactly as its last completed
flush() or close() left it: appends, in-place overwrites in "r+",
truncates and extends alike. The next writer removes what the interrupted
commit left, and readers never see anything but a committed state.

A writer subprocess runs a seeded plan of operations whose rows encode
(operation, row index), logging each step to a line-buffered file; the
parent models the plan, kills the writer (after a random delay, at a pause
point inside an operation, or at the Nth call of a syscall of the commit,
through strace), then compares every row with the modelled state.

Set DT_CRASH_SEED to replay another sequence.
"""

import collections
import hashlib
import inspect
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

import deathtensors as dt

SEED = int(os.environ.get("DT_CRASH_SEED", "20240611"))
WIDTH = 16  # int64 elements per row: 128-byte rows
MANIFEST = "collection.json"
LOCK = "writer.lock"
# Rows of source collections carry these tags; writer ops use 1000 and up.
SOURCE_TAG = 900


def rows(tag, start, n):
    """Rows start..start+n written by operation `tag`: every element says
    which operation wrote it, at which row index, in which column."""
    idx = np.arange(start, start + n, dtype=np.int64)[:, None]
    col = np.arange(WIDTH, dtype=np.int64)[None, :]
    return (np.int64(tag) << 32) | (idx << 8) | col


CHILD = (
    "WIDTH = %d\n" % WIDTH
    + "import numpy as np\n"
    + inspect.getsource(rows)
    + r'''
import json, sys
import deathtensors as dt

cfg = json.load(open(sys.argv[1]))
log = open(cfg["log"], "a", buffering=1)


def pause(k):
    """Stops inside operation k until the parent kills us."""
    log.write(f"P {k}\n")
    sys.stdin.readline()
    sys.exit("the parent did not kill us")


blob = dt.TensorBlob.open(cfg["path"], cfg["mode"], framework="numpy", durable=cfg["durable"])
sources = [dt.TensorBlob.open(p, "r", framework="numpy") for p in cfg["sources"]]
log.write("O\n")
for k, op in enumerate(cfg["ops"]):
    kind, where = op["op"], op.get("pause")
    log.write(f"B {k}\n")
    if where == "before":
        pause(k)
    if kind in ("append", "overwrite"):
        at = len(blob) if kind == "append" else op["at"]
        data = rows(op["tag"], at, op["n"])
        blob.seek(at)
        if where == "mid":
            blob.write(data[: op["n"] // 2])
            pause(k)
        blob.write(data)
    elif kind == "truncate":
        blob.truncate(op["at"])
    elif kind == "extend":
        blob.extend(sources[op["src"]], maintain_order=op["order"])
    elif kind == "extend_self":
        blob.extend(blob)
    elif kind == "extend_array":
        blob.extend(rows(op["tag"], len(blob), op["n"]))
    elif kind in ("flush", "close"):
        log.write(f"FB {op['commit']}\n")
        blob.flush() if kind == "flush" else blob.close()
        if where == "after":
            pause(k)
        log.write(f"F {op['commit']}\n")
    if kind != "close":
        assert len(blob) == op["len"], (k, op, len(blob))
    log.write(f"E {k}\n")
log.write("DONE\n")
'''
)

READER = (
    "WIDTH = %d\n" % WIDTH
    + r'''
import hashlib, os, random, sys
import numpy as np
import deathtensors as dt

path, log_path, stop, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
rng = random.Random(seed)
log = open(log_path, "a", buffering=1)
blob = None
while not os.path.exists(stop):
    if blob is None or rng.random() < 0.3:
        if blob is not None:
            blob.close()
        blob = dt.TensorBlob.open(path, "r", framework="numpy")
    else:
        blob.refresh()
    n, how = len(blob), rng.randrange(3)
    if how == 0:
        data = blob[:]
    elif how == 1:
        blob.seek(0)
        parts = []
        while blob.tell() < n:
            parts.append(blob.read(rng.randint(1, 40)))
        data = np.concatenate(parts) if parts else blob[:]
    else:
        data = blob[np.arange(n)]
    data = np.ascontiguousarray(data).reshape(-1, WIDTH)
    log.write(f"H {n} {hashlib.sha256(data.tobytes()).hexdigest()}\n")
    # Any error fails the reader: a snapshot holds its block files, and
    # opens and refreshes start over while a commit removes one.
log.write("STOP\n")
'''
)

STATS = collections.Counter()


# --- the model ---------------------------------------------------------------


def empty():
    return np.empty((0, WIDTH), dtype=np.int64)


def apply(state, op, cap, sources):
    kind = op["op"]
    if kind in ("append", "extend_array"):
        return np.concatenate([state, rows(op["tag"], len(state), op["n"])])
    if kind == "overwrite":
        at, n = op["at"], op["n"]
        return np.concatenate([state[:at], rows(op["tag"], at, n), state[at + n :]])
    if kind == "truncate":
        return state[: op["at"]].copy()
    if kind == "extend_self":
        return np.concatenate([state, state])
    if kind == "extend":
        theirs = sources[op["src"]]["rows"]
        if op["order"]:
            return np.concatenate([state, theirs])
        # tensorblob's unordered extend: both sides' full blocks, then both tails.
        mine_full, their_full = len(state) // cap * cap, len(theirs) // cap * cap
        return np.concatenate([state[:mine_full], theirs[:their_full], state[mine_full:], theirs[their_full:]])
    return state  # flush, close


class Plan:
    """Operations planned one by one, and the committed states: commits[0]
    is the starting state, commits[c] the one flush or close number c makes."""

    def __init__(self, state, cap, sources):
        self.state, self.cap, self.sources = state, cap, sources
        self.ops, self.commits = [], [state]

    def add(self, op):
        """Applies `op`, recording in it the length it leaves (and the
        commit, for a flush)."""
        self.state = apply(self.state, op, self.cap, self.sources)
        op["len"] = len(self.state)
        if op["op"] == "flush":
            op["commit"] = len(self.commits)
            self.commits.append(self.state)
        self.ops.append(op)

    def close(self):
        """Ends the plan with a close, which commits the last state: the
        operations and the committed states."""
        self.ops.append({"op": "close", "commit": len(self.commits)})
        self.commits.append(self.state)
        return self.ops, self.commits


def make_plan(rng, state, cap, mode, sources, rnd, n_ops):
    """A random sequence of operations, and the committed states (as
    :class:`Plan` gives them)."""
    plan = Plan(state, cap, sources)
    limit = 10 * cap + 60
    for k in range(n_ops):
        n = len(plan.state)
        if n > limit:
            weights = {"truncate": 1}
        else:
            weights = {
                "append": 5,
                "overwrite": 4 if mode == "r+" and n else 0,
                "truncate": 2 if n else 0,
                "extend": 2,
                "extend_self": 1 if 0 < n <= 4 * cap else 0,
                "extend_array": 1,
                "flush": 5,
            }
        kind = rng.choices(list(weights), list(weights.values()))[0]
        op = {"op": kind, "tag": rnd * 1000 + k + 1}
        if kind in ("append", "extend_array", "overwrite"):
            op["n"] = rng.choice([1, rng.randint(1, cap + 1), rng.randint(cap, 3 * cap + 2)])
            if kind == "overwrite":
                op["at"] = rng.randrange(n)
        elif kind == "truncate":
            op["at"] = rng.choice([rng.randint(0, n), n // cap * cap, max(0, n - rng.randint(1, 3))])
        elif kind == "extend":
            op["src"] = rng.randrange(len(sources))
            # Unordered extends need equal block sizes: the last source has its own.
            op["order"] = sources[op["src"]]["cap"] != cap or rng.random() < 0.5
        plan.add(op)
    return plan.close()


def describe(got, candidates):
    lines = [f"got {len(got)} rows; expected one of " + ", ".join(f"{lab}: {len(w)} rows" for lab, w in candidates)]
    for lab, want in candidates:
        m = min(len(got), len(want))
        bad = np.flatnonzero((got[:m] != want[:m]).any(axis=1))
        if len(bad):
            i = int(bad[0])
            g, w = got[i], want[i]
            lines.append(
                f"  vs {lab}: row {i} is (op {g[0] >> 32}, row {(g[0] >> 8) & 0xFFFFFF}) "
                f"columns {list(g & 0xFF)[:4]}..., expected (op {w[0] >> 32}, row {(w[0] >> 8) & 0xFFFFFF})"
            )
    return "\n".join(lines)


# --- running a writer and checking what it left ------------------------------


def read_log(path):
    text = path.read_text()
    return text.split("\n")[:-1]  # a line without its newline is not written yet


def make_sources(tmp, cap, rng):
    """Closed collections to extend from: full blocks only (shared by hard
    links), a partial last block, an empty one, and one of another block
    size (ordered extends only)."""
    out = []
    shapes = [(2 * cap, cap), (3 * cap + rng.randint(1, cap), cap), (0, cap), (cap + 3, cap + 2)]
    for i, (rows_, block) in enumerate(shapes):
        path = tmp / f"src{i}"
        data = rows(SOURCE_TAG + i, 0, rows_)
        with dt.TensorBlob.open(path, "w", dtype="int64", shape=(WIDTH,), block_size=block, framework="numpy") as b:
            b.write(data)
        out.append({"path": str(path), "rows": data, "cap": block})
    return out


def check_sources(sources):
    for s in sources:
        with dt.TensorBlob.open(s["path"], "r", framework="numpy") as b:
            assert np.array_equal(np.asarray(b[:]).reshape(-1, WIDTH), s["rows"]), s["path"]
            b.verify()


def run_writer(tmp, path, cfg, kill, prefix=()):
    """Runs the writer with plan `cfg` and kills it as `kill` says:
    ("pause", k) at its pause point, ("timed", k, delay) `delay` seconds after
    it starts operation k, ("early", delay) that long after it starts, or
    None (strace kills it). Returns the log lines."""
    log = tmp / "writer.log"
    log.write_text("")
    cfg = dict(cfg, path=str(path), log=str(log))
    (tmp / "plan.json").write_text(json.dumps(cfg))
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", OPENBLAS_NUM_THREADS="1")
    with open(tmp / "writer.err", "w") as err:
        proc = subprocess.Popen(
            [*prefix, sys.executable, "-c", CHILD, str(tmp / "plan.json")],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=env,
        )
        try:
            if kill is not None:
                if kill[0] == "early":
                    time.sleep(kill[1])
                else:
                    want = f"P {kill[1]}" if kill[0] == "pause" else f"B {kill[1]}"
                    deadline = time.monotonic() + 30
                    while want not in read_log(log) and proc.poll() is None:
                        assert time.monotonic() < deadline, "the writer hangs"
                        time.sleep(0.0005)
                    if kill[0] == "timed":
                        time.sleep(kill[2])
                proc.kill()
            rc = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdin.close()
    lines = read_log(log)
    if rc not in (0, -9) or (rc == 0 and "DONE" not in lines):
        raise AssertionError(f"writer failed ({rc}):\n{(tmp / 'writer.err').read_text()}")
    return lines


def landed(lines, ops):
    """Where the kill landed, from the writer's log."""
    if "DONE" in lines:
        return "completed"
    if "O" not in lines:
        return "before open (startup, lock, cleanup)"
    begun = [int(l.split()[1]) for l in lines if l.startswith("B ")]
    if not begun or f"E {begun[-1]}" in lines:
        return "between ops"
    k = begun[-1]
    kind = ops[k]["op"]
    if f"P {k}" in lines:
        return {
            "before": f"paused before {kind}",
            "mid": f"mid-op: {kind} (paused halfway)",
            "after": "paused after the commit, before its log line",
        }[ops[k]["pause"]]
    if kind in ("flush", "close"):
        return "mid-op: inside the commit" if f"FB {ops[k]['commit']}" in lines else f"mid-op: {kind}"
    return f"mid-op: {kind}"


def expected_states(lines, commits):
    """The states the collection may be in: the last logged commit's, or
    the next one's if that commit had begun (the kill may land between the
    rename and the log line)."""
    done = [int(l.split()[1]) for l in lines if l.startswith("F ")]
    last = max(done, default=0)
    out = [("last logged flush", commits[last])]
    if f"FB {last + 1}" in lines:
        out.append(("next flush", commits[last + 1]))
    return out


def is_manifest_temp(name):
    return name.startswith("." + MANIFEST + ".") and name.endswith(".dt-tmp")


def check_after_crash(path, candidates):
    """The collection equals one candidate exactly, row for row; a writer
    reopening it leaves only the manifest, the lock and the manifest's
    blocks; verify() passes. Returns the candidate's label, the leftovers
    found before the reopen and the manifest temp files it left."""
    json.loads((path / MANIFEST).read_text())  # the status is never torn
    with dt.TensorBlob.open(path, "r", framework="numpy") as b:
        got = np.ascontiguousarray(b[:]).reshape(-1, WIDTH)
        named = {os.path.basename(p) for p, *_ in b.blocks()}
    label = next((lab for lab, want in candidates if np.array_equal(got, want)), None)
    assert label is not None, describe(got, candidates)
    leftovers = set(os.listdir(path)) - named - {MANIFEST, LOCK}
    with dt.TensorBlob.open(path, "r+", framework="numpy") as w:
        after = set(os.listdir(path))
        # Temp manifests are the subject of test_manifest_temp_of_a_killed_commit_is_cleaned_at_next_open.
        temps = {n for n in after if is_manifest_temp(n)}
        assert after - temps == named | {MANIFEST, LOCK}, f"left after reopening: {sorted(after - named)}"
        w.verify()
        assert np.array_equal(np.ascontiguousarray(w[:]).reshape(-1, WIDTH), got)
    assert set(os.listdir(path)) - temps == named | {MANIFEST, LOCK}
    return label, leftovers, temps


def record(where, label, leftovers, temps, kind):
    """Counts a round of the random test in STATS."""
    STATS["rounds"] += 1
    STATS[f"kill: {kind}"] += 1
    STATS[f"landed {where}"] += 1
    STATS["landed mid-op"] += where.startswith("mid-op")
    STATS[f"state = {label}"] += 1
    STATS["rounds with leftovers cleaned at reopen"] += bool(leftovers - {n for n in leftovers if is_manifest_temp(n)})
    STATS["manifest temps surviving reopen"] += len(temps)


def print_stats(title, stats):
    print(f"\n{title}:")
    for key in sorted(stats):
        print(f"  {key}: {stats[key]}")


# --- the tests ---------------------------------------------------------------

# (rows per block, rounds): 17 rounds each, 68 in all.
LINEAGES = [(3, 17), (7, 17), (16, 17), (1, 17)]


@pytest.mark.slow
def test_sigkill_leaves_the_last_committed_state(tmp_path):
    """Random plans on one collection per block size, each round killed
    (after a random delay, or paused inside an operation) and checked
    before the next round goes on from what it left."""
    STATS.clear()
    start = time.monotonic()
    for lineage, (cap, n_rounds) in enumerate(LINEAGES):
        rng = random.Random(SEED * 100 + lineage)
        tmp = tmp_path / f"l{lineage}"
        tmp.mkdir()
        sources = make_sources(tmp, cap, rng)
        path = tmp / "blob"
        dt.TensorBlob.open(path, "w", dtype="int64", shape=(WIDTH,), block_size=cap, framework="numpy").close()
        state = empty()
        for rnd in range(1, n_rounds + 1):
            mode = rng.choice(["r+", "r+", "r+", "a"])
            ops, commits = make_plan(rng, state, cap, mode, sources, rnd, rng.randint(12, 30))
            style = rng.choices(["timed", "pause", "early"], [50, 35, 15])[0]
            if style == "early":
                kill = ("early", rng.uniform(0.05, 0.3))
            elif style == "timed":
                delay = rng.choice([0.0, rng.uniform(0, 0.001), rng.uniform(0, 0.005)])
                kill = ("timed", rng.randrange(len(ops)), delay)
            else:
                k = rng.randrange(len(ops))
                op = ops[k]
                where = ["before"]
                if op["op"] in ("flush", "close"):
                    where.append("after")
                if op["op"] in ("append", "overwrite") and op["n"] >= 2:
                    where.append("mid")
                op["pause"] = rng.choice(where)
                kill = ("pause", k)
            cfg = {"mode": mode, "durable": rng.random() < 0.5, "sources": [s["path"] for s in sources], "ops": ops}
            lines = run_writer(tmp, path, cfg, kill)
            where = landed(lines, ops)
            candidates = expected_states(lines, commits)
            if where == "completed":
                candidates = [("close", commits[-1])]
            if kill[0] == "pause" and ops[kill[1]].get("pause") == "after" and where != "completed":
                # Paused after the commit returned: only its state will do.
                candidates = [("next flush", commits[ops[kill[1]]["commit"]])]
            label, leftovers, temps = check_after_crash(path, candidates)
            record(where, label, leftovers, temps, kill[0])
            state = dict(candidates)[label]
        check_sources(sources)
    STATS["seconds"] = round(time.monotonic() - start)
    print_stats(f"SIGKILL crash rounds (seed {SEED})", STATS)
    assert STATS["rounds"] >= 60
    assert STATS["landed mid-op"] >= 5
    assert STATS["state = next flush"] >= 1 and STATS["state = last logged flush"] >= 1


# --- killing inside a commit, at each syscall (strace fault injection) ------

# The syscalls of writes and commits: block writes and copies, hard links of
# shared blocks and of the finished manifest, syncs, the rename, removals.
COMMIT_SYSCALLS = ["pwrite64", "copy_file_range", "ftruncate", "linkat", "fdatasync", "fsync", "rename", "unlink"]


def strace_or_skip():
    strace = shutil.which("strace")
    if strace is None:
        from conftest import missing

        missing("strace is not installed (cargo xtask setup installs it with apt-get)")
    r = subprocess.run([strace, "-qq", "-o", "/dev/null", "true"], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"strace cannot trace here: {r.stderr.decode().strip()}")
    return strace


def fixed_plan(cap, sources):
    """Every kind of change to committed rows, then commits: overwrite
    (copy on write), append into a committed partial block, truncate into a
    committed block, extend by hard links and in order."""
    plan = Plan(rows(1, 0, 10), cap, sources)
    steps = [
        {"op": "overwrite", "at": 1, "n": 2},
        {"op": "append", "n": 7},
        {"op": "flush"},
        {"op": "truncate", "at": 6},
        {"op": "extend", "src": 1, "order": False},
        {"op": "extend", "src": 0, "order": True},
        {"op": "overwrite", "at": 0, "n": 5},
        {"op": "flush"},
        {"op": "truncate", "at": 3},
        {"op": "append", "n": 2},
    ]
    for k, op in enumerate(steps):
        plan.add(dict(op, tag=2000 + k))
    return plan.close()


def fixed_setup(tmp):
    """A committed collection of 10 rows in blocks of 4 and the fixed plan."""
    cap = 4
    sources = make_sources(tmp, cap, random.Random(SEED))
    init = tmp / "init"
    with dt.TensorBlob.open(init, "w", dtype="int64", shape=(WIDTH,), block_size=cap, framework="numpy") as b:
        b.write(rows(1, 0, 10))
    ops, commits = fixed_plan(cap, sources)
    cfg = {"mode": "r+", "durable": True, "sources": [s["path"] for s in sources], "ops": ops}
    return init, ops, commits, cfg


def kill_at(strace, syscall, n):
    """An strace command line that SIGKILLs the process on entering its
    Nth call of `syscall`."""
    inject = f"inject={syscall}:signal=KILL:when={n}"
    return [strace, "-f", "-qq", "-o", "/dev/null", "-e", f"trace={syscall}", "-e", inject]


def fresh_copy(tmp, init, name):
    path = tmp / name
    if path.exists():
        shutil.rmtree(path)
    shutil.copytree(init, path)
    return path


@pytest.mark.slow
def test_sigkill_at_each_syscall_of_a_commit(tmp_path):
    """strace kills the writer on entering the Nth call of each syscall the
    writes and commits make (every N the plan reaches): inside copy on
    write, between a block's sync and the manifest's, between the link and
    the rename, before the superseded files go."""
    strace = strace_or_skip()
    init, ops, commits, cfg = fixed_setup(tmp_path)

    # A dry run counts the calls of each syscall.
    path = fresh_copy(tmp_path, init, "blob")
    trace = tmp_path / "trace"
    count = [strace, "-f", "-qq", "-o", str(trace), "-e", "trace=" + ",".join(COMMIT_SYSCALLS)]
    lines = run_writer(tmp_path, path, cfg, None, count)
    assert "DONE" in lines
    calls = collections.Counter()
    for line in trace.read_text().splitlines():
        name = line.split(None, 1)[1].split("(", 1)[0] if " " in line.strip() else ""
        calls[name] += name in COMMIT_SYSCALLS
    check_after_crash(path, [("close", commits[-1])])
    assert calls["rename"] >= 3 and calls["linkat"] >= 5 and calls["copy_file_range"] >= 1, calls

    stats = collections.Counter()
    start = time.monotonic()
    for syscall in COMMIT_SYSCALLS:
        for n in range(1, calls[syscall] + 1):
            path = fresh_copy(tmp_path, init, "blob")
            lines = run_writer(tmp_path, path, cfg, None, kill_at(strace, syscall, n))
            where = landed(lines, ops)
            label, leftovers, temps = check_after_crash(path, expected_states(lines, commits))
            stats["kill points"] += 1
            stats[f"{syscall}: {where}"] += 1
            stats[f"{syscall}: state = {label}"] += 1
            stats["kill points with leftovers cleaned at reopen"] += bool(leftovers - temps)
            stats["kill points whose manifest temp survived reopen"] += bool(temps)
    stats["seconds"] = round(time.monotonic() - start)
    print_stats("SIGKILL at the Nth call of a commit syscall (strace)", stats)
    assert stats["kill points"] >= 30


def parse_trace(text):
    """(syscall, paths of its fd arguments, its string arguments, the path
    of the fd it returned, its arguments) for each call in an
    `strace -f -y` log, in order."""
    out = []
    for line in text.splitlines():
        m = re.match(r"\d+\s+(\w+)\((.*)$", line)
        if m is None:
            continue  # "<... resumed>" halves and signals
        call, rest = m.groups()
        args = rest.split(") = ")[0] if ") = " in rest else rest
        returned = re.search(r"\) += -?\d+<([^>]*)>", rest)
        fds, strings = re.findall(r"\d+<([^>]*)>", args), re.findall(r'"([^"]*)"', args)
        out.append((call, fds, strings, returned and returned.group(1), args))
    return out


def test_durable_commit_syncs_rows_then_manifest_then_directory(tmp_path):
    """What a power loss needs, read off the syscalls of the fixed plan
    (durable): every block file written since the last commit is synced
    after its last write and before the manifest's rename; the manifest's
    temp file is synced before it is linked and renamed; the directory is
    synced after the rename, before anything the old manifest named is
    removed and before the call returns to write more."""
    strace = strace_or_skip()
    init, ops, commits, cfg = fixed_setup(tmp_path)
    path = fresh_copy(tmp_path, init, "blob")
    trace = tmp_path / "trace"
    calls = "pwrite64,copy_file_range,write,fsync,fdatasync,linkat,rename,unlink,openat"
    lines = run_writer(tmp_path, path, cfg, None, [strace, "-f", "-qq", "-y", "-o", str(trace), "-e", "trace=" + calls])
    assert "DONE" in lines
    check_after_crash(path, [("close", commits[-1])])
    blob_dir = str(path)
    written, synced, created = {}, {}, set()
    manifest_temp = None  # (path, last write, last sync)
    renames = unlinked_old = 0
    dir_sync_pending = False
    for i, (call, fds, strings, returned, args) in enumerate(parse_trace(trace.read_text())):
        if call == "openat" and returned and "/blk-" in returned and "O_CREAT" in args:
            created.add(returned)
        if call == "linkat" and len(strings) == 2 and "/blk-" in strings[1]:
            created.add(strings[1])
        if call in ("pwrite64", "copy_file_range") and fds and "/blk-" in fds[-1]:
            assert not dir_sync_pending, f"{call} on {fds[-1]} before the directory was synced after the rename"
            written[fds[-1]] = i
        if call == "write" and fds and fds[0].startswith(blob_dir + "/#"):
            manifest_temp = (fds[0], i, None)
        if call in ("fsync", "fdatasync") and fds:
            synced[fds[0]] = i
            if manifest_temp and fds[0] == manifest_temp[0]:
                manifest_temp = (manifest_temp[0], manifest_temp[1], i)
            if fds[0] == blob_dir and dir_sync_pending:
                dir_sync_pending = False
        if call == "linkat" and strings and strings[0].startswith("/proc/self/fd/"):
            synced_after_write = manifest_temp and manifest_temp[2] and manifest_temp[2] > manifest_temp[1]
            assert synced_after_write, "manifest linked before it was synced"
        if call == "rename" and strings[-1] == os.path.join(blob_dir, MANIFEST):
            unsynced = sorted(os.path.basename(p) for p, w in written.items() if synced.get(p, -1) < w)
            assert not unsynced, f"commit {renames + 1} renamed the manifest before syncing {unsynced}"
            renames += 1
            written, created, dir_sync_pending = {}, set(), True
        if call == "unlink" and strings and "/blk-" in strings[0] and strings[0] not in created:
            # A file the last manifest named: only once the new one is durable.
            assert not dir_sync_pending, f"{strings[0]} removed before the directory was synced after the rename"
            unlinked_old += 1
        if call == "unlink" and strings:
            written.pop(strings[0], None)
    assert renames == 3 and unlinked_old >= 3 and not dir_sync_pending, (renames, unlinked_old)


def test_manifest_temp_of_a_killed_commit_is_cleaned_at_next_open(tmp_path):
    strace = strace_or_skip()
    sources = make_sources(tmp_path, 4, random.Random(SEED))
    path = tmp_path / "blob"
    with dt.TensorBlob.open(path, "w", dtype="int64", shape=(WIDTH,), block_size=4, framework="numpy") as b:
        b.write(rows(1, 0, 10))
    ops = [{"op": "append", "n": 3, "tag": 2, "len": 13}, {"op": "flush", "commit": 1, "len": 13}]
    cfg = {"mode": "r+", "durable": True, "sources": [s["path"] for s in sources], "ops": ops}
    lines = run_writer(tmp_path, path, cfg, None, kill_at(strace, "rename", 1))
    assert "FB 1" in lines and "F 1" not in lines
    with dt.TensorBlob.open(path, "r+", framework="numpy") as w:
        assert len(w) == 10
        left = sorted(n for n in os.listdir(path) if n not in {MANIFEST, LOCK} and not n.startswith("blk-"))
    assert left == [], f"left after reopening: {left}"


# --- a reader while the writer is killed -------------------------------------


def digest(state):
    return len(state), hashlib.sha256(np.ascontiguousarray(state).tobytes()).hexdigest()


def test_reader_sees_only_committed_states_while_the_writer_is_killed(tmp_path):
    """A reader process reads the whole collection over and over (fresh
    opens and refresh(), by slices, read() and gather) while a writer
    commits and is killed: every read equals one committed state, and after
    the kill the reader sees the state the crash left."""
    cap = 8
    rng = random.Random(SEED + 7)
    sources = make_sources(tmp_path, cap, rng)
    path = tmp_path / "blob"
    dt.TensorBlob.open(path, "w", dtype="int64", shape=(WIDTH,), block_size=cap, framework="numpy").close()
    state = empty()
    stats = collections.Counter()
    seen = set()
    for rnd in range(1, 4):
        ops, commits = make_plan(rng, state, cap, "r+", sources, rnd, 400)
        hashes = {digest(s): c for c, s in enumerate(commits)}
        stop, rlog = tmp_path / "stop", tmp_path / "reader.log"
        stop.unlink(missing_ok=True)
        rlog.write_text("")
        with open(tmp_path / "reader.err", "w") as err:
            reader = subprocess.Popen(
                [sys.executable, "-c", READER, str(path), str(rlog), str(stop), str(rng.randrange(1 << 30))],
                stderr=err,
                env=dict(os.environ, OPENBLAS_NUM_THREADS="1"),
            )
        try:
            while not any(l.startswith("H ") for l in read_log(rlog)):
                assert reader.poll() is None, (tmp_path / "reader.err").read_text()
                time.sleep(0.001)
            # Kill the writer some time after its 8th commit.
            target = next(k for k, op in enumerate(ops) if op.get("commit", 0) >= 8)
            cfg = {"mode": "r+", "durable": False, "sources": [s["path"] for s in sources], "ops": ops}
            lines = run_writer(tmp_path, path, cfg, ("timed", target, rng.uniform(0, 0.05)))
            before_kill = len(read_log(rlog))
            deadline = time.monotonic() + 20
            while sum(l.startswith("H ") for l in read_log(rlog)[before_kill:]) < 5:
                assert reader.poll() is None, (tmp_path / "reader.err").read_text()
                assert time.monotonic() < deadline, "the reader is stuck"
                time.sleep(0.001)
            stop.touch()
            assert reader.wait(timeout=30) == 0, (tmp_path / "reader.err").read_text()
        finally:
            if reader.poll() is None:
                reader.kill()
                reader.wait()
        reads = read_log(rlog)
        assert reads[-1] == "STOP"
        for line in reads:
            if line.startswith("H "):
                _, n, sha = line.split()
                key = (int(n), sha)
                assert key in hashes, f"the reader saw {n} rows that are no committed state"
                seen.add((rnd, hashes[key]))
        stats["reads"] += sum(l.startswith("H ") for l in reads)
        candidates = expected_states(lines, commits)
        label, leftovers, temps = check_after_crash(path, candidates)
        state = dict(candidates)[label]
        final = digest(state)
        last_read = next(l for l in reversed(reads) if l.startswith("H ")).split()
        assert (int(last_read[1]), last_read[2]) == final, "after the kill the reader does not see the state it left"
        stats["writer commits before the kill"] += max((int(l.split()[1]) for l in lines if l[:2] == "F "), default=0)
        stats[f"kill landed {landed(lines, ops)}"] += 1
    stats["distinct committed states read"] = len(seen)
    print_stats("reader during writer kills", stats)
    assert stats["distinct committed states read"] >= 3
