"""nccl-tests-style benchmark of this package's backend, with a reference backend alongside.

    python -m <package>.bench --nprocs 4              # starts 4 local ranks itself
    torchrun --nproc-per-node 4 -m <package>.bench    # or under a launcher
    mpirun -n 4 python -m <package>.bench

Every size of the sweep runs on this backend, then on the reference (gloo by
default) in the same processes, so the ratio column compares like with like.
The columns follow nccl-tests: size (bytes), count (elements), type, redop,
root; for out-of-place and in-place: time (us), algbw and busbw (GB/s), #wrong
(elements that differ from the expected result, summed over ranks) and
busbw / reference busbw, the reference run the same way; a collective column
when the sweep has several. Every call completes before the next one starts,
as in a program's loop of ``dist.all_reduce(t)``. algbw = size / time and busbw = algbw * factor, the
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
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist

from . import BACKEND_NAME, DEVICES, OPS, free_port

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

    run: Callable[[], None]  # one call, waited for
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
        run=lambda: dist.all_reduce(t, op=s.reduce_op, group=s.group),
        check=lambda: _wrong(t, expected),
    )


def _all_gather(s: Setup, count: int, place: str) -> Case:
    out = s.empty(count * s.n)
    source = out.narrow(0, s.rank * count, count) if place == "in-place" else s.empty(count)
    source.copy_(s.data(s.rank, count))
    expected = torch.cat([s.data(r, count) for r in range(s.n)])
    if "_allgather_base" in OPS:
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        run = lambda: gather(out, source, group=s.group)  # noqa: E731
    else:
        outs = list(out.chunk(s.n))
        run = lambda: dist.all_gather(outs, source, group=s.group)  # noqa: E731
    return Case(run=run, check=lambda: _wrong(out, expected))


def _reduce_scatter(s: Setup, count: int, place: str) -> Case:
    inp = torch.cat([s.data(s.rank, count, shift=j) for j in range(s.n)])
    out = inp.narrow(0, s.rank * count, count) if place == "in-place" else s.empty(count)
    expected = _expected([s.data(r, count, shift=s.rank) for r in range(s.n)], s.op)
    if "_reduce_scatter_base" in OPS:
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        run = lambda: scatter(out, inp, op=s.reduce_op, group=s.group)  # noqa: E731
    else:
        chunks = list(inp.chunk(s.n))
        run = lambda: dist.reduce_scatter(out, chunks, op=s.reduce_op, group=s.group)  # noqa: E731
    return Case(run=run, check=lambda: _wrong(out, expected))


def _all_to_all(s: Setup, count: int, place: str) -> Case:
    inp = torch.cat([s.data(s.rank, count, shift=j) for j in range(s.n)])
    out = s.empty(count * s.n)
    expected = torch.cat([s.data(r, count, shift=s.rank) for r in range(s.n)])
    if "alltoall_base" in OPS:
        run = lambda: dist.all_to_all_single(out, inp, group=s.group)  # noqa: E731
    else:
        outs, ins = list(out.chunk(s.n)), list(inp.chunk(s.n))
        run = lambda: dist.all_to_all(outs, ins, group=s.group)  # noqa: E731
    return Case(run=run, check=lambda: _wrong(out, expected))


def _broadcast(s: Setup, count: int, place: str) -> Case:
    t = s.data(s.rank, count)
    expected = s.data(s.root, count)
    src = s.global_rank(s.root)
    return Case(
        run=lambda: dist.broadcast(t, src=src, group=s.group),
        check=lambda: _wrong(t, expected),
    )


def _reduce(s: Setup, count: int, place: str) -> Case:
    t = s.data(s.rank, count)
    expected = _expected([s.data(r, count) for r in range(s.n)], s.op)
    dst = s.global_rank(s.root)
    return Case(
        run=lambda: dist.reduce(t, dst=dst, op=s.reduce_op, group=s.group),
        check=lambda: _wrong(t, expected) if s.rank == s.root else 0,
    )


def _gather(s: Setup, count: int, place: str) -> Case:
    t = s.data(s.rank, count)
    outs = [s.empty(count) for _ in range(s.n)] if s.rank == s.root else None
    expected = torch.cat([s.data(r, count) for r in range(s.n)])
    dst = s.global_rank(s.root)
    return Case(
        run=lambda: dist.gather(t, gather_list=outs, dst=dst, group=s.group),
        check=lambda: _wrong(torch.cat(outs), expected) if outs else 0,
    )


def _scatter(s: Setup, count: int, place: str) -> Case:
    out = s.empty(count)
    ins = [s.data(r, count) for r in range(s.n)] if s.rank == s.root else None
    src = s.global_rank(s.root)
    return Case(
        run=lambda: dist.scatter(out, scatter_list=ins, src=src, group=s.group),
        check=lambda: _wrong(out, s.data(s.rank, count)),
    )


def _sendrecv(s: Setup, count: int, place: str) -> Case:
    t, out = s.data(s.rank, count), s.empty(count)
    to, frm = s.global_rank((s.rank + 1) % s.n), s.global_rank((s.rank - 1) % s.n)

    def run() -> None:
        for work in [dist.isend(t, to, group=s.group), dist.irecv(out, frm, group=s.group)]:
            work.wait()

    return Case(run=run, check=lambda: _wrong(out, s.data((s.rank - 1) % s.n, count)))


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


def _synchronize(device: str) -> None:
    """Waits for the GPU: a waited-for CUDA op is only ordered before the caller's stream."""
    if device == "cuda":
        torch.cuda.synchronize()


def _measure(case_for: Callable[[], Case], args, sync_group, n: int, collective, size: int) -> Result:
    """Times ``iters`` calls (after ``warmup``), each waited for, then checks one fresh run.

    Each call completes before the next starts, as in a program's loop and as
    nccl-tests' kernels on one stream. Issuing all of them asynchronously and
    waiting at the end measures something else: the ops then queue up on one
    buffer, and a backend that starts them all at once (an MPI library may)
    runs them concurrently, slower and on data still being written.
    """
    case = case_for()
    for _ in range(args.warmup):
        case.run()
    _synchronize(args.device)
    _barrier(sync_group)
    start = time.perf_counter()
    for _ in range(args.iters):
        case.run()
    _synchronize(args.device)
    elapsed = _max_over_ranks(time.perf_counter() - start, sync_group) / args.iters
    wrong = None
    if args.check:
        fresh = case_for()  # in-place ops change their input: check a fresh run
        fresh.run()
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
    names = args.collectives
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


def _ratio(ours: Result, theirs: Result | None) -> float | None:
    if theirs is None or not ours.busbw or not theirs.busbw:
        return None
    return ours.busbw / theirs.busbw


def report(rows: list[Row], args: argparse.Namespace, world_size: int) -> str:
    """The nccl-tests table for this backend; with a reference, busbw / its busbw per variant.

    Several collectives get a collective column and one average each. As in
    nccl-tests, ``# Avg bus bandwidth`` averages the out-of-place and in-place
    busbw of every size.
    """
    reference = args.reference if args.reference != "none" else None
    names = list(dict.fromkeys(row.collective for row in rows))
    name_width = 1 + max(len("collective"), *map(len, names)) if len(names) > 1 else 0
    ratio_head = f"busbw/{reference}" if reference else ""
    ratio_width = len(ratio_head) + 1 if reference else 0
    block = 9 + 9 + 9 + 9 + ratio_width  # time, algbw, busbw, #wrong, ratio: each with its space

    def head(collective: str, size: str, count: str, type_: str, redop: str, root: str,
             *cells: str) -> str:  # fmt: skip
        text = f"#{collective:>{name_width}} " if name_width else "#"
        text += f"{size:>11} {count:>11} {type_:>8} {redop:>6} {root:>5}"
        for time_, algbw, busbw, wrong, ratio in (cells[:5], cells[5:]):
            text += f" {time_:>8} {algbw:>8} {busbw:>8} {wrong:>8}"
            text += f" {ratio:>{ratio_width - 1}}" if reference else ""
        return text

    title = f"# {BACKEND_NAME}" + (f" vs {reference}" if reference else "")
    prefix = (name_width + 1 if name_width else 0) + 46  # up to the end of the root column
    lines = [
        f"{title}: {world_size} ranks, dtype {args.dtype}, {args.iters} iterations after "
        f"{args.warmup} warm-up, each call waited for, torch {torch.__version__}",
        f"#{'':>{prefix - 1}}{OOP:^{block}}{IP:^{block}}".rstrip(),
        head("collective", "size", "count", "type", "redop", "root",
             *["time", "algbw", "busbw", "#wrong", ratio_head] * 2),  # fmt: skip
        head("", "(B)", "(elements)", "", "", "", *["(us)", "(GB/s)", "(GB/s)", "", ""] * 2).rstrip(),
    ]
    busbws: dict[str, list[float]] = {name: [] for name in names}
    reference_busbws: dict[str, list[float]] = {name: [] for name in names}
    wrong_total = 0
    for row in rows:
        ours = row.results[BACKEND_NAME]
        theirs = row.results.get(reference, {}) if reference else {}
        line = f" {row.collective:>{name_width}} " if name_width else " "
        line += f"{row.size:>11} {row.count:>11} {row.type:>8} {row.redop:>6} {row.root:>5}"
        for place in (OOP, IP):
            r = ours.get(place, Result())
            line += (
                f" {_cell(r.time_us, 1, 8)} {_cell(r.algbw, 3, 8)} {_cell(r.busbw, 3, 8)}"
                f" {_cell(r.wrong, 0, 8)}"
            )
            if reference:
                line += f" {_cell(_ratio(r, theirs.get(place)), 2, ratio_width - 1)}"
            wrong_total += r.wrong or 0
            if r.busbw is not None:
                busbws[row.collective].append(r.busbw)
            if theirs.get(place) is not None and theirs[place].busbw is not None:
                reference_busbws[row.collective].append(theirs[place].busbw)
        lines.append(line)
    lines.append(f"# Out of bounds values : {wrong_total} {'OK' if wrong_total == 0 else 'FAILED'}")
    for name in names:
        which = f" ({name})" if len(names) > 1 else ""
        lines.append(f"# Avg bus bandwidth    : {statistics.fmean(busbws[name]):.4f}{which}")
        if reference_busbws[name]:
            average = statistics.fmean(reference_busbws[name])
            lines.append(f"# Avg bus bandwidth of {reference} : {average:.4f}{which}")
    return "\n".join(lines)


def _pyplot():
    """matplotlib's pyplot, drawing to files; None when matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


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
    plt = _pyplot()
    if plt is None:
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
            if _pyplot() is None:
                print(f"# no {args.out}.png: matplotlib is not installed", flush=True)
    finally:
        dist.destroy_process_group()


def _spawned(rank: int, world_size: int, port: int, args: argparse.Namespace) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    _rank_main(rank, world_size, args)


class _Parser(argparse.ArgumentParser):
    """Under a launcher only rank 0 prints a usage error: one message, not one per rank."""

    def error(self, message: str):
        launched = _launched()
        if launched is not None and launched[0] != 0:
            sys.exit(2)
        super().error(message)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, checked before any rank starts; ``collectives`` becomes a list."""

    def size(text: str) -> int:
        units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
        text = text.strip().upper().removesuffix("B")
        return int(float(text[:-1]) * units[text[-1]]) if text[-1:] in units else int(text)

    parser = _Parser(prog=f"python -m {__package__}.bench", description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("-b", "--minbytes", type=size, default=size("8"), help="smallest size (default: 8)")
    add("-e", "--maxbytes", type=size, default=size("16M"), help="largest size (default: 16M)")
    add("-f", "--stepfactor", type=float, default=4.0, help="size multiplier (default: %(default)s)")
    add("-n", "--iters", type=int, default=20, help="timed calls per size (default: %(default)s)")
    add("-w", "--warmup", type=int, default=5, help="untimed calls first (default: %(default)s)")
    add("-d", "--dtype", choices=sorted(DTYPES), default="float", metavar="TYPE",
        help="element type: %(choices)s (default: %(default)s)")  # fmt: skip
    add("-o", "--op", choices=sorted(REDUCE_OPS), default="sum", metavar="OP",
        help="reduce op: %(choices)s (default: %(default)s)")  # fmt: skip
    add("-r", "--root", type=int, default=0, help="root of rooted collectives (default: %(default)s)")
    add("-c", "--check", type=int, choices=[0, 1], default=1,
        help="count wrong elements at every size (default: %(default)s)")  # fmt: skip
    add("--collectives", default="all",
        help=f"comma-separated, from: {', '.join(available())} (default: all of them)")  # fmt: skip
    add("--reference", default="gloo",
        help="backend measured alongside, or none (default: %(default)s)")  # fmt: skip
    add("--device", choices=["cpu", "cuda"], default="cpu" if "cpu" in DEVICES else "cuda",
        help="where the tensors live (default: %(default)s)")  # fmt: skip
    add("--nprocs", type=int, default=2,
        help="local ranks to start when not under a launcher (default: %(default)s)")  # fmt: skip
    add("--out", metavar="PREFIX",
        help="write every row to PREFIX.json and, with matplotlib, a busbw plot to PREFIX.png "
             f"(default: bench-{BACKEND_NAME}-<ranks>ranks in the current directory)")  # fmt: skip
    add("--timeout", type=float, default=600, help="process group timeout, s (default: %(default)s)")
    add("--progress", action=argparse.BooleanOptionalAction,
        help="print each step to stderr (default: when stderr is a terminal, or the sweep "
             "spans more than 4096x in size)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.minbytes < 1 or args.maxbytes < args.minbytes or args.stepfactor <= 1:
        parser.error("need 1 <= --minbytes <= --maxbytes and --stepfactor > 1")
    if args.iters < 1 or args.warmup < 0 or args.nprocs < 1:
        parser.error("need --iters >= 1, --warmup >= 0 and --nprocs >= 1")
    args.collectives = available() if args.collectives == "all" else args.collectives.split(",")
    unknown = [name for name in args.collectives if name not in available()]
    if unknown:
        parser.error(f"--collectives {','.join(unknown)}: {BACKEND_NAME} runs {', '.join(available())}")
    if args.device == "cuda" and not torch.cuda.is_available():
        built = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        parser.error(f"--device cuda: torch {torch.__version__} ({built}) sees no CUDA device")
    if args.device not in DEVICES:
        parser.error(f"--device {args.device}: {BACKEND_NAME} runs on {', '.join(DEVICES)}")
    if args.reference != "none":
        usable = [name for name, devices in dist.Backend.backend_capability.items()
                  if args.device in devices and dist.is_backend_available(name)]  # fmt: skip
        if args.reference not in usable:
            parser.error(f"--reference {args.reference}: not a backend this torch runs on "
                         f"{args.device}; choose from {', '.join([*usable, 'none'])}")  # fmt: skip
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
    port = free_port()
    torch.multiprocessing.spawn(_spawned, args=(world_size, port, args), nprocs=world_size)


if __name__ == "__main__":
    main()
