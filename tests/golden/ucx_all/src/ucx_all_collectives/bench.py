"""nccl-tests-style benchmark of the "ucx_all" backend, with a reference backend alongside.

    python -m ucx_all_collectives.bench --nprocs 4              # starts 4 local ranks itself
    torchrun --nproc-per-node 4 -m ucx_all_collectives.bench    # or under a launcher
    mpirun -n 4 python -m ucx_all_collectives.bench

Every size of the sweep runs on this backend, then on the reference (gloo by
default) in the same processes, so the ratio column compares like with like.
The columns follow nccl-tests: size (bytes), count (elements), type, redop,
root; for out-of-place and in-place: time (us), algbw and busbw (GB/s), #wrong
(elements that differ from the expected result, summed over ranks); then
busbw / reference busbw. algbw = size / time and busbw = algbw * factor, the
factor making busbw comparable across collectives and rank counts:
2(n-1)/n for all_reduce, (n-1)/n for all_gather, reduce_scatter, all_to_all,
gather and scatter (whose size is the whole n-rank buffer), 1 for broadcast,
reduce and sendrecv. "N/A" marks a variant torch.distributed has no call for.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist

from . import BACKEND_NAME, OPS

LAUNCHER_ENV = [  # (rank, world size) variables of common launchers
    ("RANK", "WORLD_SIZE"),  # torchrun
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),  # Open MPI
    ("PMI_RANK", "PMI_SIZE"),  # MPICH, Intel MPI
    ("SLURM_PROCID", "SLURM_NTASKS"),  # srun
]
DTYPES = {
    "float": torch.float32, "float32": torch.float32, "half": torch.float16,
    "float16": torch.float16, "bfloat16": torch.bfloat16, "double": torch.float64,
    "float64": torch.float64, "int8": torch.int8, "uint8": torch.uint8,
    "int32": torch.int32, "int": torch.int32, "int64": torch.int64,
}  # fmt: skip
REDUCE_OPS = {"sum": "SUM", "prod": "PRODUCT", "min": "MIN", "max": "MAX", "avg": "AVG"}


# -- the collectives --------------------------------------------------------------


@dataclass
class Case:
    """Buffers for one collective at one size, and how to run and check it."""

    run: Callable[[bool], object]  # run(async_op) -> handle
    check: Callable[[], int]  # elements that differ from the expected result


@dataclass(frozen=True)
class Collective:
    name: str  # nccl-tests' name
    needs: tuple[str, ...]  # catalogue ops, any of which implements it
    factor: Callable[[int], float]  # busbw = algbw * factor(n)
    whole_buffer: bool  # the size is the n-rank buffer (count * n elements)
    reduces: bool
    rooted: bool
    places: tuple[str, ...]  # "out-of-place", "in-place": the variants torch can call


def _expected(values: list[torch.Tensor], op: str) -> torch.Tensor:
    stack = torch.stack([v.double() for v in values])
    return {
        "sum": stack.sum(0), "prod": stack.prod(0), "min": stack.min(0).values,
        "max": stack.max(0).values, "avg": stack.mean(0),
    }[op]  # fmt: skip


def _wrong(actual: torch.Tensor, expected: torch.Tensor) -> int:
    actual = actual.double().cpu()
    expected = expected.to(actual.dtype)
    tolerance = 1e-2 * expected.abs().clamp(min=1) if actual.is_floating_point() else 0
    return int(((actual - expected).abs() > tolerance).sum())


class Setup:
    """One benchmark step's context: ranks, group, dtype and the data each rank sends."""

    def __init__(self, args: argparse.Namespace, group, device: torch.device):
        self.group = group
        self.rank = dist.get_rank(group)
        self.n = dist.get_world_size(group)
        self.dtype = DTYPES[args.dtype]
        self.op = args.op
        self.reduce_op = getattr(dist.ReduceOp, REDUCE_OPS[args.op])
        self.root = args.root % self.n
        self.device = device

    def data(self, rank: int, count: int, shift: int = 0) -> torch.Tensor:
        """Small integers, exact in every dtype: a different tensor for every rank and chunk.

        ``rank + n * shift`` tells every (rank, shift) apart: with ``rank + shift``,
        rank r's chunk s equals rank s's chunk r, and an all-to-all or a
        reduce-scatter that keeps each rank's own chunks would pass the check.
        """
        values = (torch.arange(count) % 5 + rank + self.n * shift + 1).to(self.dtype)
        return values.to(self.device)

    def empty(self, count: int) -> torch.Tensor:
        return torch.full((count,), -1, dtype=self.dtype, device=self.device)

    def global_rank(self, rank: int) -> int:
        return dist.get_global_rank(self.group, rank) if self.group is not None else rank


def _all_reduce(s: Setup, count: int, place: str) -> Case:
    t = s.data(s.rank, count)
    expected = _expected([s.data(r, count) for r in range(s.n)], s.op)
    return Case(
        run=lambda a: dist.all_reduce(t, op=s.reduce_op, group=s.group, async_op=a),
        check=lambda: _wrong(t, expected),
    )


def _all_gather(s: Setup, count: int, place: str) -> Case:
    out = s.empty(count * s.n)
    source = out.narrow(0, s.rank * count, count) if place == "in-place" else s.empty(count)
    source.copy_(s.data(s.rank, count))
    expected = torch.cat([s.data(r, count) for r in range(s.n)])
    if "_allgather_base" in OPS:
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        run = lambda a: gather(out, source, group=s.group, async_op=a)  # noqa: E731
    else:
        outs = list(out.chunk(s.n))
        run = lambda a: dist.all_gather(outs, source, group=s.group, async_op=a)  # noqa: E731
    return Case(run=run, check=lambda: _wrong(out, expected))


def _reduce_scatter(s: Setup, count: int, place: str) -> Case:
    inp = torch.cat([s.data(s.rank, count, shift=j) for j in range(s.n)])
    out = inp.narrow(0, s.rank * count, count) if place == "in-place" else s.empty(count)
    expected = _expected([s.data(r, count, shift=s.rank) for r in range(s.n)], s.op)
    if "_reduce_scatter_base" in OPS:
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        run = lambda a: scatter(out, inp, op=s.reduce_op, group=s.group, async_op=a)  # noqa: E731
    else:
        chunks = list(inp.chunk(s.n))
        run = lambda a: dist.reduce_scatter(  # noqa: E731
            out, chunks, op=s.reduce_op, group=s.group, async_op=a
        )
    return Case(run=run, check=lambda: _wrong(out, expected))


def _all_to_all(s: Setup, count: int, place: str) -> Case:
    inp = torch.cat([s.data(s.rank, count, shift=j) for j in range(s.n)])
    out = s.empty(count * s.n)
    expected = torch.cat([s.data(r, count, shift=s.rank) for r in range(s.n)])
    if "alltoall_base" in OPS:
        run = lambda a: dist.all_to_all_single(out, inp, group=s.group, async_op=a)  # noqa: E731
    else:
        outs, ins = list(out.chunk(s.n)), list(inp.chunk(s.n))
        run = lambda a: dist.all_to_all(outs, ins, group=s.group, async_op=a)  # noqa: E731
    return Case(run=run, check=lambda: _wrong(out, expected))


def _broadcast(s: Setup, count: int, place: str) -> Case:
    t = s.data(s.rank, count)
    expected = s.data(s.root, count)
    src = s.global_rank(s.root)
    return Case(
        run=lambda a: dist.broadcast(t, src=src, group=s.group, async_op=a),
        check=lambda: _wrong(t, expected),
    )


def _reduce(s: Setup, count: int, place: str) -> Case:
    t = s.data(s.rank, count)
    expected = _expected([s.data(r, count) for r in range(s.n)], s.op)
    dst = s.global_rank(s.root)
    return Case(
        run=lambda a: dist.reduce(t, dst=dst, op=s.reduce_op, group=s.group, async_op=a),
        check=lambda: _wrong(t, expected) if s.rank == s.root else 0,
    )


def _gather(s: Setup, count: int, place: str) -> Case:
    t = s.data(s.rank, count)
    outs = [s.empty(count) for _ in range(s.n)] if s.rank == s.root else None
    expected = torch.cat([s.data(r, count) for r in range(s.n)])
    dst = s.global_rank(s.root)
    return Case(
        run=lambda a: dist.gather(t, gather_list=outs, dst=dst, group=s.group, async_op=a),
        check=lambda: _wrong(torch.cat(outs), expected) if outs else 0,
    )


def _scatter(s: Setup, count: int, place: str) -> Case:
    out = s.empty(count)
    ins = [s.data(r, count) for r in range(s.n)] if s.rank == s.root else None
    src = s.global_rank(s.root)
    return Case(
        run=lambda a: dist.scatter(out, scatter_list=ins, src=src, group=s.group, async_op=a),
        check=lambda: _wrong(out, s.data(s.rank, count)),
    )


def _sendrecv(s: Setup, count: int, place: str) -> Case:
    t, out = s.data(s.rank, count), s.empty(count)
    to, frm = s.global_rank((s.rank + 1) % s.n), s.global_rank((s.rank - 1) % s.n)

    def run(async_op: bool):
        works = [dist.isend(t, to, group=s.group), dist.irecv(out, frm, group=s.group)]
        return _Handles(works) if async_op else _Handles(works).wait()

    return Case(run=run, check=lambda: _wrong(out, s.data((s.rank - 1) % s.n, count)))


class _Handles:
    """Several works waited for as one."""

    def __init__(self, works):
        self.works = works

    def wait(self):
        for work in self.works:
            work.wait()


def _ring(n: int) -> float:
    return 2 * (n - 1) / n


def _part(n: int) -> float:
    return (n - 1) / n


def _one(n: int) -> float:
    return 1.0


OOP, IP = "out-of-place", "in-place"
COLLECTIVES: dict[str, tuple[Collective, Callable[[Setup, int, str], Case]]] = {
    "all_reduce": (Collective("all_reduce", ("allreduce",), _ring, False, True, False, (IP,)), _all_reduce),
    "all_gather": (Collective("all_gather", ("_allgather_base", "allgather"), _part, True, False, False, (OOP, IP)), _all_gather),
    "reduce_scatter": (Collective("reduce_scatter", ("_reduce_scatter_base", "reduce_scatter"), _part, True, True, False, (OOP, IP)), _reduce_scatter),
    "all_to_all": (Collective("all_to_all", ("alltoall_base", "alltoall"), _part, True, False, False, (OOP,)), _all_to_all),
    "broadcast": (Collective("broadcast", ("broadcast",), _one, False, False, True, (IP,)), _broadcast),
    "reduce": (Collective("reduce", ("reduce",), _one, False, True, True, (IP,)), _reduce),
    "gather": (Collective("gather", ("gather",), _part, True, False, True, (OOP,)), _gather),
    "scatter": (Collective("scatter", ("scatter",), _part, True, False, True, (OOP,)), _scatter),
    "sendrecv": (Collective("sendrecv", ("send", "recv"), _one, False, False, False, (OOP,)), _sendrecv),
}  # fmt: skip


def available() -> list[str]:
    """The collectives this backend implements, in nccl-tests' names."""
    names = []
    for name, (collective, _) in COLLECTIVES.items():
        ok = all(op in OPS for op in collective.needs) if name == "sendrecv" else any(
            op in OPS for op in collective.needs
        )
        if ok:
            names.append(name)
    return names


# -- measuring -------------------------------------------------------------------


@dataclass
class Result:
    time_us: float | None = None
    algbw: float | None = None
    busbw: float | None = None
    wrong: int | None = None


@dataclass
class Row:
    collective: str
    size: int
    count: int
    type: str
    redop: str
    root: int
    results: dict[str, dict[str, Result]] = field(default_factory=dict)  # backend -> place -> Result


def _barrier(sync_group) -> None:
    dist.barrier(group=sync_group)


def _max_over_ranks(value: float, sync_group) -> float:
    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=sync_group)
    return float(t.item())


def _sum_over_ranks(value: int, sync_group) -> int:
    t = torch.tensor([value], dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.SUM, group=sync_group)
    return int(t.item())


def _measure(case_for: Callable[[], Case], args, sync_group, n: int, collective, size: int) -> Result:
    """Times ``iters`` back-to-back async runs (after ``warmup``), then checks one fresh run."""
    case = case_for()
    for _ in range(args.warmup):
        case.run(False)
    _barrier(sync_group)
    start = time.perf_counter()
    handles = [case.run(True) for _ in range(args.iters)]
    for handle in handles:
        if handle is not None:
            handle.wait()
    elapsed = _max_over_ranks(time.perf_counter() - start, sync_group) / args.iters
    wrong = None
    if args.check:
        fresh = case_for()  # in-place ops change their input: check a fresh run
        fresh.run(False)
        wrong = _sum_over_ranks(fresh.check(), sync_group)
    algbw = size / elapsed / 1e9
    return Result(elapsed * 1e6, algbw, algbw * collective.factor(n), wrong)


def run_sweep(args: argparse.Namespace) -> list[Row] | None:
    """Runs the sweep on every rank; returns the rows on rank 0."""
    device = torch.device(args.device)
    if device.type == "cuda":
        device = torch.device("cuda", torch.cuda.current_device())
    sync = dist.new_group(backend="gloo")  # timing and counting, off the measured backends
    groups = {BACKEND_NAME: None}
    if args.reference != "none":
        groups[args.reference] = dist.new_group(backend=args.reference)
    names = args.collectives.split(",") if args.collectives != "all" else available()
    unknown = [c for c in names if c not in COLLECTIVES or c not in available()]
    if unknown:
        raise SystemExit(f"{BACKEND_NAME} cannot run {unknown}; it implements {available()}")
    dtype = DTYPES[args.dtype]
    element = torch.empty(0, dtype=dtype).element_size()
    n = dist.get_world_size()
    sizes = []
    size = args.minbytes
    while size <= args.maxbytes:
        sizes.append(size)
        size = max(size + 1, int(size * args.stepfactor))
    steps = [(c, s) for c in names for s in sizes]
    rows: list[Row] = []
    for index, (name, size) in enumerate(steps, 1):
        collective, make = COLLECTIVES[name]
        per = element * (n if collective.whole_buffer else 1)
        count = max(size // per, 1)
        real_size = count * per
        if dist.get_rank() == 0 and args.progress:
            print(f"[{index}/{len(steps)}] {name} {real_size} B", file=sys.stderr, flush=True)
        row = Row(name, real_size, count, args.dtype, args.op if collective.reduces else "none",
                  args.root if collective.rooted else -1)  # fmt: skip
        for backend, group in groups.items():
            setup = Setup(args, group, device)
            row.results[backend] = {}
            for place in collective.places:
                try:
                    row.results[backend][place] = _measure(
                        lambda place=place, setup=setup: make(setup, count, place),
                        args, sync, n, collective, real_size,
                    )  # fmt: skip
                except RuntimeError as e:
                    if backend == BACKEND_NAME:
                        raise
                    row.results[backend][place] = Result()  # the reference lacks it: N/A
                    if dist.get_rank() == 0 and index == 1:
                        print(f"# {backend} cannot run {name}: {e}", file=sys.stderr)
        rows.append(row)
    return rows if dist.get_rank() == 0 else None


# -- reporting -------------------------------------------------------------------


def _cell(value, digits: int, width: int) -> str:
    if value is None:
        return f"{'N/A':>{width}}"
    return f"{value:>{width}.{digits}f}" if isinstance(value, float) else f"{value:>{width}}"


def report(rows: list[Row], args: argparse.Namespace, world_size: int) -> str:
    """The nccl-tests table for this backend, with the reference's busbw ratio."""
    lines = [
        f"# {BACKEND_NAME} vs {args.reference}: {world_size} ranks, dtype {args.dtype}, "
        f"{args.iters} iterations after {args.warmup} warm-up, torch {torch.__version__}",
        f"#{'':>45}{'out-of-place':^38}{'in-place':^38}",
        f"#{'size':>11} {'count':>11} {'type':>8} {'redop':>6} {'root':>5} "
        + (f"{'time':>9} {'algbw':>8} {'busbw':>8} {'#wrong':>8}   " * 2)
        + f"{'busbw/' + args.reference if args.reference != 'none' else '':>12}",
        f"#{'(B)':>11} {'(elements)':>11} {'':>8} {'':>6} {'':>5} "
        + (f"{'(us)':>9} {'(GB/s)':>8} {'(GB/s)':>8} {'':>8}   " * 2),
    ]
    busbws, reference_busbws, wrong_total = [], [], 0
    for row in rows:
        ours = row.results[BACKEND_NAME]
        cells = []
        for place in (OOP, IP):
            r = ours.get(place, Result())
            cells.append(
                f"{_cell(r.time_us, 1, 9)} {_cell(r.algbw, 3, 8)} {_cell(r.busbw, 3, 8)} "
                f"{_cell(r.wrong, 0, 8)}   "
            )
            wrong_total += r.wrong or 0
        best = next(ours[p] for p in (IP, OOP) if p in ours)
        busbws.append(best.busbw)
        ratio = ""
        if args.reference != "none":
            theirs = row.results[args.reference]
            reference = next(theirs[p] for p in (IP, OOP) if p in theirs)
            if reference.busbw:
                reference_busbws.append(reference.busbw)
                ratio = f"{best.busbw / reference.busbw:12.2f}"
            else:
                ratio = f"{'N/A':>12}"
        lines.append(
            f" {row.size:>11} {row.count:>11} {row.type:>8} {row.redop:>6} {row.root:>5} "
            + "".join(cells)
            + ratio
        )
    lines.append(f"# Out of bounds values : {wrong_total} {'OK' if wrong_total == 0 else 'FAILED'}")
    lines.append(f"# Avg bus bandwidth    : {statistics.fmean(busbws):.4f}")
    if reference_busbws:
        lines.append(
            f"# Avg bus bandwidth of {args.reference} : {statistics.fmean(reference_busbws):.4f}"
        )
    return "\n".join(lines)


def save(rows: list[Row], args: argparse.Namespace, world_size: int) -> list[str]:
    """Writes PREFIX.json, and PREFIX.png when matplotlib is installed; returns the paths."""
    meta = {
        "backend": BACKEND_NAME, "reference": args.reference, "world_size": world_size,
        "dtype": args.dtype, "op": args.op, "iters": args.iters, "warmup": args.warmup,
        "torch": torch.__version__, "host": platform.node(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }  # fmt: skip
    written = [f"{args.out}.json"]
    with open(written[0], "w") as f:
        json.dump({"meta": meta, "rows": [asdict(row) for row in rows]}, f, indent=2)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return written
    names = list(dict.fromkeys(row.collective for row in rows))
    figure, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 4), squeeze=False)
    for axis, name in zip(axes[0], names, strict=True):
        mine = [row for row in rows if row.collective == name]
        for backend in mine[0].results:
            points = []
            for row in mine:
                result = next(row.results[backend][p] for p in (IP, OOP) if p in row.results[backend])
                if result.busbw:
                    points.append((row.size, result.busbw))
            if points:
                axis.plot(*zip(*points, strict=True), marker="o", label=backend)
        axis.set(xscale="log", yscale="log", title=name, xlabel="size (B)", ylabel="busbw (GB/s)")
        axis.legend()
    figure.tight_layout()
    written.append(f"{args.out}.png")
    figure.savefig(written[1])
    return written


# -- launching -------------------------------------------------------------------


def _launched() -> tuple[int, int] | None:
    for rank_var, size_var in LAUNCHER_ENV:
        if rank_var in os.environ and size_var in os.environ:
            return int(os.environ[rank_var]), int(os.environ[size_var])
    return None


def _rank_main(rank: int, world_size: int, args: argparse.Namespace) -> None:
    if torch.cuda.is_available() and args.device == "cuda":
        torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group(BACKEND_NAME, rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=args.timeout))  # fmt: skip
    try:
        rows = run_sweep(args)
        if rows is not None:
            print(report(rows, args, world_size), flush=True)
            for path in save(rows, args, world_size):
                print(f"# wrote {path}", flush=True)
    finally:
        dist.destroy_process_group()


def _spawned(rank: int, world_size: int, port: int, args: argparse.Namespace) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    _rank_main(rank, world_size, args)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    def size(text: str) -> int:
        units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
        text = text.strip().upper().removesuffix("B")
        return int(float(text[:-1]) * units[text[-1]]) if text[-1:] in units else int(text)

    parser = argparse.ArgumentParser(
        prog=f"python -m {__name__}", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )  # fmt: skip
    parser.add_argument("-b", "--minbytes", type=size, default=size("8"), help="smallest size")
    parser.add_argument("-e", "--maxbytes", type=size, default=size("16M"), help="largest size")
    parser.add_argument("-f", "--stepfactor", type=float, default=4.0, help="size multiplier")
    parser.add_argument("-n", "--iters", type=int, default=20, help="timed iterations per size")
    parser.add_argument("-w", "--warmup", type=int, default=5, help="untimed iterations first")
    parser.add_argument("-d", "--dtype", choices=sorted(DTYPES), default="float")
    parser.add_argument("-o", "--op", choices=sorted(REDUCE_OPS), default="sum", help="reduce op")
    parser.add_argument("-r", "--root", type=int, default=0, help="root of rooted collectives")
    parser.add_argument("-c", "--check", type=int, choices=[0, 1], default=1,
                        help="check the result of every size")  # fmt: skip
    parser.add_argument("--collectives", default="all",
                        help=f"comma-separated, from: {', '.join(COLLECTIVES)}")  # fmt: skip
    parser.add_argument("--reference", default="gloo", help="backend to compare with, or none")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--nprocs", type=int, default=2,
                        help="local ranks to start when not under a launcher")  # fmt: skip
    parser.add_argument("--out", default=None, help="prefix of the .json and .png written")
    parser.add_argument("--timeout", type=float, default=600, help="process group timeout (s)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="print each step to stderr (default: on long sweeps)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.minbytes < 1 or args.maxbytes < args.minbytes or args.stepfactor <= 1:
        parser.error("need 1 <= --minbytes <= --maxbytes and --stepfactor > 1")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    launched = _launched()
    world_size = launched[1] if launched else args.nprocs
    if args.out is None:
        args.out = f"bench-{BACKEND_NAME}-{world_size}ranks"
    if args.progress is None:
        args.progress = sys.stderr.isatty() or args.maxbytes / args.minbytes > 4**6
    if launched:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29500")
        _rank_main(launched[0], world_size, args)
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.multiprocessing.spawn(_spawned, args=(world_size, port, args), nprocs=world_size)


if __name__ == "__main__":
    main()
