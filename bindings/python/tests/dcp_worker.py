"""Rank programs for test_distributed.py: each runs in a process of its own
(a forkserver child with torch already imported), joins a gloo group on
loopback and runs one scenario. Everything is derived from seeds, so every
rank and the test itself can rebuild the full tensors."""

import datetime
import os
import time
import traceback

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.tensor import DTensor, Replicate, Shard, init_device_mesh

from deathtensors.distributed import StorageReader, StorageWriter

#: Every dtype DCP saves (the float8 ones included).
DTYPES = [
    torch.float32, torch.float64, torch.float16, torch.bfloat16,
    torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool,
    torch.complex64, torch.complex128, torch.uint16, torch.uint32, torch.uint64,
    torch.float8_e4m3fn, torch.float8_e5m2,
]


def full(name, shape, dtype=torch.float32, seed=0):
    """The full tensor called ``name``, the same in every process."""
    g = torch.Generator().manual_seed(hash_name(name) + seed)
    t = torch.randn(shape, generator=g) * 20
    if dtype in (torch.uint8, torch.uint16, torch.uint32, torch.uint64):
        t = t.abs()
    return t.to(dtype)


def hash_name(name):
    return sum((i + 1) * ord(c) for i, c in enumerate(name)) % 100_003


def as_bytes(t):
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(as_bytes(a), as_bytes(b))


def local_chunk(t, mesh, placements):
    """This rank's part of ``t`` under ``placements`` (one mesh dimension),
    without a collective (gloo has none for float8 or uint16)."""
    (p,) = placements
    if isinstance(p, Shard):
        world, rank = mesh.size(), mesh.get_local_rank()
        return t.tensor_split(world, dim=p.dim)[rank].clone(memory_format=torch.contiguous_format) if t.shape[p.dim] % world == 0 else None
    return t.clone()


def dtensor(t, mesh, placement):
    return DTensor.from_local(local_chunk(t, mesh, [placement]), mesh, [placement], run_check=False)


SHAPES = {"model.w": (16, 12), "model.b": (12,), "model.emb": (8, 6)}


def model_state(mesh, w_placement, seed=0, zeros=False):
    """A model's state: DTensors sharded or replicated, one of each dtype."""
    make = (lambda n, s, d=torch.float32: torch.zeros(s, dtype=d)) if zeros else (lambda n, s, d=torch.float32: full(n, s, d, seed))
    sd = {
        "model.w": dtensor(make("model.w", SHAPES["model.w"]), mesh, w_placement),
        "model.b": dtensor(make("model.b", SHAPES["model.b"]), mesh, Replicate()),
        "model.emb": dtensor(make("model.emb", SHAPES["model.emb"]), mesh, Shard(0)),
        "plain": make("plain", (5, 3)),
    }
    for dt in DTYPES:
        name = f"dtypes.{str(dt).split('.')[-1]}"
        sd[name] = dtensor(make(name, (8, 4), dt), mesh, Shard(0))
    sd["scalar"] = make("scalar", ())
    return sd


def optim_state(zeros=False, seed=0):
    """An Adam state dict after one step (tensors, ints, floats, tuples,
    bools, None, nested lists), or its zeroed twin to load into."""
    torch.manual_seed(seed)
    lin = torch.nn.Linear(4, 3)
    opt = torch.optim.Adam(lin.parameters(), lr=0.01 if not zeros else 0.5)
    if not zeros:
        lin(torch.randn(2, 4)).sum().backward()
        opt.step()
        return opt.state_dict()
    lin(torch.randn(2, 4)).sum().backward()
    opt.step()
    sd = opt.state_dict()
    for st in sd["state"].values():
        for k, v in st.items():
            v.zero_()
    return sd


def extras(zeros=False, seed=0):
    if zeros:
        return {"step": 0, "epoch_losses": [], "config": {"layers": 0, "act": "", "dims": [], "nested": {"a": 1, "b": False}}, "name": "", "ratio": 0.0, "flags": (), "nothing": 1}
    return {
        "step": 1000 + seed,
        "epoch_losses": [1.5, 0.25, float("inf")],
        "config": {"layers": 2, "act": "gelu", "dims": [16, 12], "nested": {"a": None, "b": True}},
        "name": "run-7",
        "ratio": float("nan"),
        "flags": (True, False, "x"),
        "nothing": None,
    }


def run(rank, world, port, scenario, args, errfile):
    try:
        import faulthandler

        if os.environ.get("DCP_WORKER_DUMP"):
            faulthandler.dump_traceback_later(float(os.environ["DCP_WORKER_DUMP"]), exit=True, file=open(errfile + f".{rank}", "w"))
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=60))
        try:
            SCENARIOS[scenario](rank, world, *args)
        finally:
            if scenario not in ("save_loop",):
                dist.barrier()
            dist.destroy_process_group()
    except BaseException:
        with open(errfile, "a") as f:
            f.write(f"rank {rank}:\n{traceback.format_exc()}\n")
        raise


def save(rank, world, path, fs_path, async_path, fmt, options=None):
    mesh = init_device_mesh("cpu", (world,))
    sd = {"model": model_state(mesh, Shard(0)), "optim": optim_state(), "extras": extras()}
    dcp.save(sd, storage_writer=StorageWriter(path, format=fmt, block_bytes=64, storage_options=options))
    if fs_path:
        dcp.save(sd, storage_writer=dcp.FileSystemWriter(fs_path))
    if async_path:
        sd2 = {"model": model_state(mesh, Shard(0), seed=1), "optim": optim_state(seed=1), "extras": extras(seed=1)}
        # A group of its own: the save runs in a thread while this one goes on.
        group = dist.new_group(backend="gloo")
        dcp.async_save(sd2, storage_writer=StorageWriter(async_path, format=fmt), process_group=group).result()


def load(rank, world, path, fs_path, w_dim, seed, options=None):
    """Loads with other placements (model.w sharded on ``w_dim``, or
    replicated when ``w_dim`` is None) and checks every value."""
    mesh = init_device_mesh("cpu", (world,))
    placement = Replicate() if w_dim is None else Shard(w_dim)
    sd = {"model": model_state(mesh, placement, zeros=True), "optim": optim_state(zeros=True), "extras": extras(zeros=True)}
    dcp.load(sd, storage_reader=StorageReader(path, storage_options=options))
    check(sd, mesh, placement, seed)
    if fs_path:
        # Differential: torch's own reader of torch's own checkpoint gives the same.
        ref = {"model": model_state(mesh, placement, zeros=True), "optim": optim_state(zeros=True), "extras": extras(zeros=True)}
        dcp.load(ref, storage_reader=dcp.FileSystemReader(fs_path))
        for k, v in sd["model"].items():
            assert same(v.to_local() if isinstance(v, DTensor) else v, ref["model"][k].to_local() if isinstance(v, DTensor) else ref["model"][k]), k
        assert_optim_equal(sd["optim"], ref["optim"])


def check(sd, mesh, placement, seed):
    for name, v in sd["model"].items():
        shape = SHAPES.get(name, (8, 4) if name.startswith("dtypes.") else ((5, 3) if name == "plain" else ()))
        dtype = v.dtype
        expect = full(name, shape, dtype, seed)
        if isinstance(v, DTensor):
            expect = local_chunk(expect, mesh, list(v.placements))
            v = v.to_local()
        assert same(v, expect), f"{name}: {v} != {expect}"
    assert_optim_equal(sd["optim"], optim_state(seed=seed))
    want = extras(seed=seed)
    got = sd["extras"]
    assert got.keys() == want.keys(), (got, want)
    for k in want:
        if k == "ratio":
            assert got[k] != got[k]
        else:
            assert got[k] == want[k] and type(got[k]) is type(want[k]), (k, got[k], want[k])


def assert_optim_equal(a, b):
    assert a["param_groups"] == b["param_groups"], (a["param_groups"], b["param_groups"])
    assert a["state"].keys() == b["state"].keys()
    for i in a["state"]:
        for k in a["state"][i]:
            assert same(a["state"][i][k], b["state"][i][k]), (i, k)


def save_loop(rank, world, path, flag, fmt, mode="plain"):
    """Saves step 1, 2, 3, ... until killed; ``flag`` appears once step 1
    committed (``mode="nocoll"``: ``flag-<rank>``, once this rank's step 1
    committed). ``mode``: ``plain``, ``cache`` (the default planner with
    plan caching, one planner for every save) or ``nocoll`` (every rank
    saves its own state without collectives)."""
    from torch.distributed.checkpoint.default_planner import DefaultSavePlanner

    planner = DefaultSavePlanner(enable_plan_caching=True) if mode == "cache" else None
    step = 1
    while True:
        if mode == "nocoll":
            dcp.save(own_state(rank, step), storage_writer=StorageWriter(path, format=fmt), use_collectives=False)
            if step == 1:
                open(f"{flag}-{rank}", "w").close()
        else:
            dcp.save(loop_state(step), storage_writer=StorageWriter(path, format=fmt), planner=planner)
            if step == 1 and rank == 0:
                open(flag, "w").close()
        step += 1
        time.sleep(0.001 * (rank + 1))


def own_state(rank, step, zeros=False):
    """Rank ``rank``'s own state of a save without collectives: four
    tensors every element of which says the rank and the step, and the
    step."""
    v = 0.0 if zeros else float(step + 1000 * rank)
    return {**{f"t{i}": torch.full((64, 128), v + i) for i in range(4)}, "step": 0 if zeros else step, "rank": -1 if zeros else rank}


def check_own(rank, world, path):
    """Each rank loads its own checkpoint (saved without collectives) and
    finds one whole step of its own state."""
    sd = own_state(rank, 0, zeros=True)
    dcp.load(sd, storage_reader=StorageReader(path))
    step = sd["step"]
    assert sd["rank"] == rank and step >= 1, (rank, sd["rank"], step)
    for i in range(4):
        assert torch.equal(sd[f"t{i}"], torch.full((64, 128), float(step + 1000 * rank + i))), f"rank {rank}: t{i} is not from step {step}"


def loop_state(step, zeros=False, local=True):
    """Four tensors of 64 KiB and a step counter: every element says the step."""
    world = dist.get_world_size() if local else 1
    rank = dist.get_rank() if local else 0
    v = 0.0 if zeros else float(step)
    sd = {f"t{i}": torch.full((128 // world, 128), v + i) for i in range(4)}
    if local and world > 1:
        mesh = init_device_mesh("cpu", (world,))
        sd = {k: DTensor.from_local(t, mesh, [Shard(0)], run_check=False) for k, t in sd.items()}
    sd["step"] = 0 if zeros else step
    sd["meta"] = {"saved_at_step": 0 if zeros else step, "rank_count": world}
    return sd


def noop(rank, world):
    pass


def disk_state(rank, mib, value):
    """Rank ``rank``'s own tensor, ``r<rank>``, of ``mib`` MiB: every
    element says ``value``."""
    return {f"r{rank}": torch.full((mib * (1 << 20) // 4,), float(value))}


def full_disk(rank, world, path, sizes, value, expect):
    """Saves each rank's ``disk_state`` of ``sizes[rank]`` MiB; with
    ``expect="enospc"`` the save must fail on every rank (DCP's
    CheckpointException) naming the full disk."""
    sd = disk_state(rank, sizes[rank], value)
    try:
        dcp.save(sd, storage_writer=StorageWriter(path, block_bytes=4 << 20))
    except BaseException as e:
        if expect != "enospc":
            raise
        assert "No space left on device" in str(e), str(e)
        return
    assert expect == "ok", "the save did not fail"


def without_collectives(rank, world, path, async_path):
    """Every rank saves a state of its own without collectives (twice: the
    second replaces the first), into one directory, then loads it: each
    finds exactly what it saved, never another rank's. Then the same with
    ``async_save``."""
    for step in (1, 2):
        dcp.save(own_state(rank, step), storage_writer=StorageWriter(path, durable=False), use_collectives=False)
    dist.barrier()
    check_own(rank, world, path)
    names = os.listdir(path)
    ours = [n for n in names if n.startswith(f"rank-{rank:05}-")]
    assert len(ours) == 1 and f"deathtensors.rank-{rank:05}.json" in names, names
    dcp.async_save(own_state(rank, 7), storage_writer=StorageWriter(async_path), use_collectives=False).result()
    check_own(rank, world, async_path)
    sd = own_state(rank, 0, zeros=True)
    dcp.load(sd, storage_reader=StorageReader(async_path))
    assert sd["step"] == 7, sd["step"]


class StopBeforeCommit(StorageWriter):
    """A writer whose save stops after every rank wrote its file and before
    the commit, as a job killed there would."""

    def finish(self, metadata, results):
        raise RuntimeError("stopped before the commit")


def plan_caching(rank, world, path):
    """Saves with the default planner's plan cache on: step 1 commits, step
    2 stops after writing and before its commit (the checkpoint must stay
    step 1, every value of it), step 3 commits. Each save writes files of
    its own names."""
    from torch.distributed.checkpoint.default_planner import DefaultSavePlanner

    planner = DefaultSavePlanner(enable_plan_caching=True)
    dcp.save(loop_state(1), storage_writer=StorageWriter(path, durable=False), planner=planner)
    dist.barrier()
    first = sorted(n for n in os.listdir(path) if n.startswith("rank-"))
    try:
        dcp.save(loop_state(2), storage_writer=StopBeforeCommit(path, durable=False), planner=planner)
        raise AssertionError("the save did not stop")
    except BaseException as e:  # DCP's CheckpointException is a BaseException
        if isinstance(e, AssertionError):
            raise
        assert "stopped before the commit" in str(e), str(e)
    dist.barrier()
    assert_loop_step(path, 1)
    second = sorted(n for n in os.listdir(path) if n.startswith("rank-"))
    # The committed files are untouched; step 2's are beside them.
    assert set(first) < set(second), (first, second)
    dist.barrier()
    dcp.save(loop_state(3), storage_writer=StorageWriter(path, durable=False), planner=planner)
    dist.barrier()
    assert_loop_step(path, 3)


def assert_loop_step(path, step):
    sd = loop_state(0, zeros=True)
    dcp.load(sd, storage_reader=StorageReader(path))
    assert sd["step"] == step and sd["meta"]["saved_at_step"] == step, (sd["step"], sd["meta"])
    for i in range(4):
        local = sd[f"t{i}"].to_local() if isinstance(sd[f"t{i}"], DTensor) else sd[f"t{i}"]
        assert torch.equal(local, torch.full_like(local, float(step + i))), f"t{i} is not from step {step}"


def async_process(rank, world, path):
    """``async_save`` with the process-based checkpointer, then a load."""
    from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType

    mesh = init_device_mesh("cpu", (world,))
    sd = {"model": model_state(mesh, Shard(0)), "optim": optim_state(), "extras": extras()}
    dcp.async_save(sd, storage_writer=StorageWriter(path), async_checkpointer_type=AsyncCheckpointerType.PROCESS).result()
    dist.barrier()
    load(rank, world, path, "", 0, 0)


SCENARIOS = {
    "noop": noop, "save": save, "load": load, "save_loop": save_loop, "full_disk": full_disk, "check_own": check_own,
    "without_collectives": without_collectives, "plan_caching": plan_caching, "async_process": async_process,
}


# The first optimizer step imports much of torch (seconds): take that cost
# once in the forkserver, whose children inherit it. One thread, so that no
# OpenMP pool exists when the forkserver forks.
torch.set_num_threads(1)
optim_state()
