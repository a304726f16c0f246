"""Test cases, run on every rank of a harness.Cluster.

Each case calls torch.distributed the way a user would and compares the result
with an expectation computed here, independently of any backend. The per-op
cases come from new-backend's catalogue of collectives.

The dummy backend zeroes every output instead of communicating, so
``ctx.check`` asserts zeros of the expected shape and dtype; replace
``REAL = False`` with ``True`` once the ops really communicate and the same
cases check real results.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import inspect
import math
import os
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.torch_version import TorchVersion
from harness import BACKEND, Skip
from names import ENV, NAME, PACKAGE

package = importlib.import_module(PACKAGE)

#: The ops the backend implements.
OPS = {
    "allreduce",
}
#: Which arguments of each op's torch.distributed call (by position) it writes: every
#: other tensor the call is given must come back unchanged (catalogue.toml: writes).
WRITES = {
    "allreduce": (0,),
}
#: The ops that take a reduce op.
REDUCING = {
    "allreduce",
}
REDUCE_OPS = ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"]
#: A dtype each reduce op is defined on (float32 for the others).
REDUCE_OP_DTYPES = {"BAND": "int32", "BOR": "int32", "BXOR": "int32"}
#: Point-to-point tags over the range of c10d's int: a transport that keeps 16 or
#: 28 bits of a tag mixes up the first three; MPI may refuse the last (MPI_TAG_UB).
TAGS = [7, 7 + 2**16, 7 + 2**28, 2**31 - 1]
#: The device the cases use: the backend's first device.
DEVICE = "cpu" if "cpu" in package.DEVICES else "cuda"
#: Whether the backend really communicates (False: the tutorial's dummy semantics).
REAL = False
#: The seed of the random data of ``Ctx(values="real")``; every failure names it.
SEED = int(os.environ.get(ENV + "TEST_SEED", "2026"))
#: The dtypes random data is made for: over each one's whole range, with its extremes.
REAL_DTYPES = {
    "float16", "bfloat16", "float32", "float64", "complex64", "complex128",
    "int8", "uint8", "int16", "int32", "int64", "bool",
}  # fmt: skip

_GROUPS: dict[tuple, object] = {}


def subgroup(ranks: tuple[int, ...], backend: str | None = None):
    """The process group of ``ranks``, created once (every rank must take part)."""
    if (ranks, backend) not in _GROUPS:
        _GROUPS[ranks, backend] = dist.new_group(list(ranks), backend=backend)
    return _GROUPS[ranks, backend]


def gloo_group():
    """gloo over every rank: the reference the tests compare this backend with."""
    return subgroup(tuple(range(dist.get_world_size())), backend="gloo")


class Ctx:
    """What a case knows: who this rank is, what to send, what to expect."""

    def __init__(
        self,
        dtype: str = "float32",
        reduce_op: str = "SUM",
        root_index: int = 0,
        async_op: bool = False,
        n: int = 10,
        group_ranks: tuple[int, ...] | None = None,
        noncontiguous: bool = False,
        gloo: bool = False,
        device: str = DEVICE,
        values: str = "small",
        layout: str = "contiguous",
        seed: int = SEED,
        row: tuple[int, ...] = (),
    ):
        self.rank = dist.get_rank()
        self.group = gloo_group() if gloo else None
        self.ranks = list(range(dist.get_world_size()))
        if group_ranks is not None:
            group = subgroup(tuple(group_ranks))
            if self.rank not in group_ranks:
                raise _NotMember
            self.group = group
            self.ranks = list(group_ranks)
        self.world = len(self.ranks)
        self.index = self.ranks.index(self.rank)
        self.root = self.ranks[root_index % self.world]
        self.dtype = getattr(torch, dtype)
        self.op = getattr(dist.ReduceOp, reduce_op)
        self.async_op = async_op
        self.handles: list | None = None  # when a list, finish() keeps handles instead
        self.n = n
        self.layout = "strided" if noncontiguous else layout
        self.row = tuple(row)  # each of the n elements of a tensor is a row of this shape
        self.writes: tuple[int, ...] | None = None  # set by the op's case (WRITES)
        self.seed = seed
        self.values = values if dtype in REAL_DTYPES else "small"
        self.device = torch.device(device)
        if self.device.type == "cuda":
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.real = REAL
        self.ops = OPS

    def split(self, sender: int, receiver: int) -> int:
        """What the sender sends the receiver (indices in the group) in an uneven all-to-all.

        Asymmetric (a rank sends other sizes than it receives) and sometimes zero.
        """
        return 3 * ((2 * sender + receiver + 1) % (self.world + 1))

    @property
    def next_rank(self) -> int:
        return self.ranks[(self.index + 1) % self.world]

    @property
    def prev_rank(self) -> int:
        return self.ranks[(self.index - 1) % self.world]

    # -- data ---------------------------------------------------------------

    def _layout(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` (flat) laid out as ``self.layout`` says, on the case's device.

        "strided": every other element; "offset": a view that starts one
        element into its storage; "column": a column of a 3-column matrix, so
        2-D, strided and offset at once.
        """
        t = t.to(self.device)
        if self.layout == "contiguous":
            return t
        if self.layout == "strided":
            view = torch.zeros(t.numel(), 2, dtype=t.dtype, device=self.device)[:, 0].view(t.shape)
        elif self.layout == "offset":
            view = torch.zeros(t.numel() + 1, dtype=t.dtype, device=self.device)[1:].view(t.shape)
        elif self.layout == "column" and t.dim() == 1:
            view = torch.zeros(t.numel(), 3, dtype=t.dtype, device=self.device)[:, 1:2]
        else:
            raise ValueError(f"no layout {self.layout!r} for a tensor of shape {tuple(t.shape)}")
        view.copy_(t.view(view.shape))
        return view

    def data(self, rank: int, shift: int = 0, n: int | None = None) -> torch.Tensor:
        """What ``rank`` sends as its ``shift``-th tensor of ``n`` elements.

        With ``values="small"``: integers 1 to 8 that tell ranks apart.
        Element 0 is ``1 + rank``, element 1 is ``1 + (rank + shift) % 8``: up to
        8 ranks and 8 shifts, every (rank, shift) sends a different tensor, so a
        result holding another rank's or chunk's data, or ranks in another order,
        is wrong. The other elements cycle through 1 to 4 with the position, rank
        and shift. Over up to 8 ranks, sums (at most 36) and products stay exact
        in int8, uint8, float16 and bfloat16 (wrapping alike in the integers),
        every value is a float8 number, and every two reduce ops give different
        results (their bit patterns differ too: 1, 2, 3, 4...). bool keeps the
        low bit.

        With ``values="real"``: what real tensors hold (see ``_real``). With
        ``row``, each of the ``n`` elements is a row of that shape (what
        all_to_all_single's split sizes count).
        """
        n = self.n if n is None else n
        shape = (n, *self.row)
        m = math.prod(shape)
        if self.values == "real":
            return self._layout(self._real(rank, shift, m).view(shape))
        values = 1 + (torch.arange(m) + 2 * rank + shift) % 4
        values[:2] = torch.tensor([1 + rank % 8, 1 + (rank + shift) % 8])[:m]
        if self.dtype == torch.bool:
            values = values % 2
        return self._layout(values.to(self.dtype).view(shape))

    def _real(self, rank: int, shift: int, n: int) -> torch.Tensor:
        """Random values, seeded by (seed, rank, shift, n, dtype), the dtype's extremes first.

        Integers: uniform over the dtype's whole range (int64 beyond 2^53), led
        by its maximum and minimum on every rank (so sums and products wrap), -1
        and 2^53 + 1 + rank. Floats: both signs, magnitudes over up to 16
        decades (sums are rounded differently in every order), led by -0.0,
        +inf, +inf on the first rank against -inf on the others, a subnormal,
        an eighth of the largest value and, except for MIN and MAX (where gloo
        and torch define NaN differently), a NaN on the first rank.
        """
        key = repr((self.seed, rank, shift, n, str(self.dtype), str(self.op)))
        seed = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=7).digest(), "little")
        g = torch.Generator().manual_seed(seed)
        first = rank == self.ranks[0]
        if self.dtype == torch.bool:
            return torch.randint(0, 2, (n,), generator=g).bool()
        if self.dtype.is_complex:
            part = torch.float32 if self.dtype == torch.complex64 else torch.float64
            re, im = self._floats(g, n, part, first, extremes=False), self._floats(g, n, part, first, extremes=False)
            return torch.complex(re, im)
        if self.dtype.is_floating_point:
            return self._floats(g, n, self.dtype, first, extremes=True)
        info = torch.iinfo(self.dtype)
        values = torch.randint(info.min, info.max, (n,), generator=g, dtype=torch.int64)
        extremes = [info.max, info.min, -1 if info.min < 0 else 1]
        if self.dtype == torch.int64:
            extremes.append(2**53 + 1 + rank)
        extremes = extremes[:n]
        values[: len(extremes)] = torch.tensor(extremes, dtype=torch.int64)
        return values.to(self.dtype)

    def _floats(self, g: torch.Generator, n: int, dtype: torch.dtype, first: bool, extremes: bool) -> torch.Tensor:
        info = torch.finfo(dtype)
        signs = torch.randint(0, 2, (n,), generator=g).double() * 2 - 1
        if self.op == dist.ReduceOp.PRODUCT:  # products of any number of ranks stay in range
            values = signs * (0.5 + 1.5 * torch.rand(n, generator=g, dtype=torch.float64))
        else:
            decades = min(8, int(math.log10(info.max)) - 2)
            exponents = torch.randint(-decades, decades + 1, (n,), generator=g).double()
            values = signs * (1 + 9 * torch.rand(n, generator=g, dtype=torch.float64)) * 10**exponents
        if extremes:
            special = [-0.0, math.inf, math.inf if first else -math.inf, info.smallest_normal / 4, info.max / 8]
            if self.op not in (dist.ReduceOp.MIN, dist.ReduceOp.MAX):
                special.append(math.nan if first else 1.0)
            special = special[:n]
            values[: len(special)] = torch.tensor(special, dtype=torch.float64)
        return values.to(dtype)

    def empty(self, n: int | None = None) -> torch.Tensor:
        """An output tensor, filled with a value no rank sends (12: exact in every dtype)."""
        n = self.n if n is None else n
        fill = True if self.dtype == torch.bool else 12
        return self._layout(torch.full((n, *self.row), fill, dtype=self.dtype))

    def reduce(self, tensors: list[torch.Tensor]) -> torch.Tensor:
        """The reduction of ``tensors`` with ``self.op``, computed in a wide type."""
        if self.dtype.is_complex:
            wide = torch.complex128
        elif self.dtype.is_floating_point:
            wide = torch.float64
        else:
            wide = torch.int64
        xs = [t.to(wide) for t in tensors]
        op = self.op
        if op == dist.ReduceOp.SUM:
            result = functools.reduce(torch.add, xs)
        elif op == dist.ReduceOp.AVG:
            result = functools.reduce(torch.add, xs) / len(xs)
        elif op == dist.ReduceOp.PRODUCT:
            result = functools.reduce(torch.mul, xs)
        elif op == dist.ReduceOp.MIN:
            result = functools.reduce(torch.minimum, xs)
        elif op == dist.ReduceOp.MAX:
            result = functools.reduce(torch.maximum, xs)
        elif op == dist.ReduceOp.BAND:
            result = functools.reduce(torch.bitwise_and, xs)
        elif op == dist.ReduceOp.BOR:
            result = functools.reduce(torch.bitwise_or, xs)
        elif op == dist.ReduceOp.BXOR:
            result = functools.reduce(torch.bitwise_xor, xs)
        else:
            raise ValueError(f"no expectation for {op}")
        expected = result.to(self.dtype)
        if self.values == "real" and wide != torch.int64 and op not in (dist.ReduceOp.MIN, dist.ReduceOp.MAX):
            # Rounded in any order, n values are off the exact result by at most
            # about n units in the last place of the sum of their magnitudes (of
            # the product, for PRODUCT), plus what underflow loses.
            info = torch.finfo(torch.float32 if self.dtype == torch.complex64 else self.dtype)
            if op == dist.ReduceOp.PRODUCT:
                scale = functools.reduce(torch.mul, [x.abs() for x in xs])
            else:
                scale = functools.reduce(torch.add, [x.abs() for x in xs])
            smallest = info.smallest_normal * info.eps
            expected.exact = result
            expected.bound = (len(xs) + 1) * info.eps * scale + 2 ** len(xs) * len(xs) * smallest
        return expected

    def check(self, actual: torch.Tensor, expected: torch.Tensor) -> None:
        """``actual`` is ``expected`` (for the dummy: zeros shaped like ``expected``).

        With real values: bit for bit, or, for a float reduction (made by
        ``reduce``), within the rounding error any order of reduction allows,
        with NaN, infinities and the sign of zero exactly where they belong.
        """
        assert actual.shape == expected.shape, f"shape {tuple(actual.shape)} != {tuple(expected.shape)}"
        assert actual.dtype == expected.dtype, f"dtype {actual.dtype} != {expected.dtype}"
        assert actual.device == expected.device, f"device {actual.device} != {expected.device}"
        if not expected.is_cpu:  # compared on the host
            actual, expected = actual.cpu(), expected.cpu()
        if not self.real:
            assert not actual.any(), f"{BACKEND} should zero its outputs, got {actual}"
            return
        if self.values == "real":
            actual = actual.cpu()
            if hasattr(expected, "bound"):
                _within(actual, expected)
            else:
                same = _bits(actual) == _bits(expected)
                assert same.all(), _first_difference(actual, expected, ~same, "bit for bit")
            return
        if self.dtype.itemsize == 1 and self.dtype.is_floating_point:  # float8: compare bits
            assert torch.equal(actual.view(torch.uint8), expected.view(torch.uint8)), (
                f"got {actual}, expected {expected}"
            )
        elif self.dtype.is_floating_point or self.dtype.is_complex:
            loose = self.dtype in (torch.float16, torch.bfloat16)
            torch.testing.assert_close(
                actual, expected, rtol=1e-2 if loose else 1e-5, atol=1e-2 if loose else 1e-6
            )
        else:
            assert torch.equal(actual, expected), f"got {actual}, expected {expected}"

    def agree(self, t: torch.Tensor) -> None:
        """Every rank holds the same bits in ``t``, as all_reduce promises (DDP relies on it).

        Checked with real values on the whole world (a gloo all_gather of the bits).
        """
        if self.values != "real" or self.world != dist.get_world_size() or t.numel() == 0:
            return
        mine = _bits(t.cpu()).reshape(-1)
        everyone = [torch.empty_like(mine) for _ in self.ranks]
        dist.all_gather(everyone, mine, group=gloo_group())
        for rank, theirs in zip(self.ranks, everyone):
            differ = theirs != mine
            assert not differ.any(), (
                f"rank {rank} holds other bits than rank {self.rank} in {int(differ.sum())} of"
                f" {differ.numel()} places, the first at {differ.nonzero()[0].item()}"
            )

    # -- calling torch.distributed -----------------------------------------------

    def api(self, *names: str):
        """The first of ``names`` this torch.distributed has (names change across releases)."""
        for name in names:
            if hasattr(dist, name):
                return getattr(dist, name)
        raise Skip(f"torch {torch.__version__} has none of {', '.join(names)}: a newer torch has")

    def finish(self, handle) -> None:
        """Checks what a call returned: nothing when synchronous, a finished handle otherwise."""
        if not self.async_op:
            assert handle is None, f"a synchronous call returned {handle!r}"
            return
        assert handle is not None, "an async_op=True call returned no handle"
        if self.handles is not None:
            self.handles.append(handle)
            return
        if isinstance(handle, torch._C.Future):  # some calls return a bare future
            handle.wait()
            assert handle.done()
            return
        future = handle.get_future()
        chained = future.then(lambda f: [t.clone() for t in _tensors(f.value())])
        assert handle.wait(timeout=timedelta(seconds=60)) is True
        assert handle.is_completed() and handle.is_success()
        assert handle.exception() is None
        assert future.done()
        outputs = _tensors(future.value())  # raises if the op failed
        assert [t.data_ptr() for t in handle.result()] == [t.data_ptr() for t in outputs]
        copies = chained.wait()
        assert len(copies) == len(outputs)
        assert all(torch.equal(_bits(a), _bits(b)) for a, b in zip(copies, outputs))

    def call(self, fn, *args, **kwargs) -> None:
        """Calls a collective with this case's group and async_op, and finishes it; the
        tensors it only reads come back unchanged."""
        kwargs.setdefault("group", self.group)
        kwargs.setdefault("async_op", self.async_op)
        with self.unchanged(self.read_only(fn, args, kwargs), fn.__name__):
            self.finish(fn(*args, **kwargs))

    def p2p(self, blocking, nonblocking, *args, **kwargs) -> None:
        """send/recv have no async_op: use isend/irecv for async cases."""
        kwargs.setdefault("group", self.group)
        with self.unchanged(self.read_only(blocking, args, kwargs), blocking.__name__):
            if self.async_op:
                self.finish(nonblocking(*args, **kwargs))
            else:
                blocking(*args, **kwargs)

    def coalesced(self, issue, reads: list[torch.Tensor] = ()) -> None:
        """Issues collectives inside torch.distributed's coalescing manager; ``reads``, the
        tensors they only read, come back unchanged."""
        with self.unchanged(list(reads), "the coalesced calls"):
            with dist._coalescing_manager(group=self.group, async_ops=self.async_op) as manager:
                issue()
            if self.async_op:
                manager.wait()

    def read_only(self, fn, args: tuple, kwargs: dict) -> list[torch.Tensor]:
        """The tensors given to ``fn(*args, **kwargs)`` that the op's contract (``writes``)
        says it only reads, but for those that share memory with one it writes."""
        if self.writes is None:
            return []
        names = list(inspect.signature(fn).parameters)
        given = {**dict(zip(names, args)), **kwargs}
        written = {names[i] for i in self.writes if i < len(names)}
        memory = {t.untyped_storage().data_ptr() for k in written for t in _tensors(given.get(k))}
        return [
            t
            for name, value in given.items()
            if name not in written
            for t in _tensors(value)
            if t.untyped_storage().data_ptr() not in memory
        ]

    @contextlib.contextmanager
    def unchanged(self, tensors: list[torch.Tensor], what: str):
        """``tensors`` hold the same bits after the block as before it (checked once the block
        waited for its ops: not while the case keeps their handles)."""
        before = [t.clone() for t in tensors]
        yield
        if self.handles is not None:
            return
        for t, copy in zip(tensors, before):
            t, copy = t.cpu(), copy.cpu()
            same = _bits(t) == _bits(copy)
            assert same.all(), f"{what} changed a tensor it only reads: " + _first_difference(
                t, copy, ~same, "from before the call"
            )

    def ring_exchange(self, tag: int) -> None:
        """Every rank sends to the next and receives from the previous one."""
        out, sent = self.empty(), self.data(self.rank)
        with self.unchanged([sent], "send"):
            works = [
                dist.isend(sent, self.next_rank, group=self.group, tag=tag),
                dist.irecv(out, self.prev_rank, group=self.group, tag=tag),
            ]
            for work in works:
                assert work.wait() is True
        self.check(out, self.data(self.prev_rank))

    def require(self, op: str, why: str) -> None:
        if op not in self.ops:
            raise Skip(f"{BACKEND} does not implement {op}: {why}")


class _NotMember(Exception):
    """This rank is not in the case's subgroup: nothing to do."""


def _bits(t: torch.Tensor) -> torch.Tensor:
    """``t``'s elements as integers of the same size: equal exactly when their bits are."""
    t = t.contiguous()
    if t.dtype == torch.bool:  # any byte but 0 is True (gloo sums bools as bytes)
        return (t.view(torch.uint8) != 0).to(torch.uint8)
    if t.is_complex():
        t = torch.view_as_real(t)
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def _first_difference(actual: torch.Tensor, expected: torch.Tensor, wrong: torch.Tensor, how: str) -> str:
    """How many elements differ, and the first of them; ``wrong`` marks them.

    Never raises: a report that failed would stop this rank alone, and leave
    the others waiting for it in their next collective.
    """
    while wrong.dim() > actual.dim():  # complex numbers compared as pairs of floats (_bits)
        wrong = wrong.any(dim=-1)
    try:
        where = tuple(i.item() for i in wrong.nonzero()[0])
        got, want = actual[where].item(), expected[where].item()
    except Exception as e:  # noqa: BLE001 - any failure to locate it still reports the difference
        return f"the elements differ ({how}); locating the first failed: {e!r}"
    return f"{int(wrong.sum())} of {wrong.numel()} elements differ ({how}); the first at {where}: got {got!r}, expected {want!r}"


def _within(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """A float reduction: NaN, infinities and true zeros exact, the rest within ``expected.bound``."""
    exact = expected.exact
    nan = torch.isnan(expected)
    assert torch.equal(torch.isnan(actual), nan), _first_difference(actual, expected, torch.isnan(actual) != nan, "NaN")
    inf = torch.isinf(expected)
    wrong = inf & (actual != expected)
    assert not wrong.any(), _first_difference(actual, expected, wrong, "infinities")
    finite = ~nan & ~inf
    wrong = finite & ((actual.to(exact.dtype) - exact).abs() > expected.bound)
    assert not wrong.any(), _first_difference(
        actual, exact, wrong, "by more than the rounding of any order of reduction"
    )
    if not actual.is_complex():
        zero = finite & (exact == 0)
        wrong = zero & (torch.signbit(actual) != torch.signbit(expected))
        assert not wrong.any(), _first_difference(actual, expected, wrong, "the sign of zero")


def _tensors(value) -> list[torch.Tensor]:
    """The tensors in a value (a tensor, or nested lists of them; anything else holds none):
    a future's value, or an argument of a call."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors(item)]
    return []


# -- one case per op (from new-backend's catalogue) ----------------------------


def allreduce(ctx: Ctx) -> None:
    """Reduces the tensor of every rank; every rank gets the result."""
    ctx.writes = WRITES["allreduce"]
    t = ctx.data(ctx.rank)
    ctx.call(dist.all_reduce, t, op=ctx.op)
    ctx.check(t, ctx.reduce([ctx.data(r) for r in ctx.ranks]))
    ctx.agree(t)


#: The ops with an aliased in-place form (``<op>_in_place``).
IN_PLACE = {
}
#: The calls of ``shapes``: zero elements, a column of a matrix (2-D, strided,
#: offset) of an odd size that no transport's chunk divides, a view that starts
#: into its storage, asynchronously; 2-D and 3-D tensors whose rows (what
#: all_to_all_single's splits count) hold several elements.
SHAPES = [
    {"n": 0},
    {"n": 1031, "layout": "column"},
    {"n": 67, "layout": "offset", "async_op": True},
    {"n": 7, "row": (3,)},
    {"n": 5, "row": (2, 3), "layout": "offset"},
]


def shapes(ctx: Ctx, op: str) -> None:
    """``op`` on random data, in the shapes of ``SHAPES``, then in place where it has such a form."""
    for shape in SHAPES:
        globals()[op](Ctx(values="real", **shape))
        dist.barrier(group=gloo_group())  # a receive from any rank takes this call's message only
    if op in IN_PLACE:
        globals()[f"{op}_in_place"](Ctx(values="real", n=67))



def every_reduction(ctx: Ctx, op: str) -> list[str]:
    """``op`` with every reduce op on the case's group, which may be a subgroup (AVG
    divides by its size), on a dtype each is defined for; returns those the backend took.

    A reduce op the backend does not support is refused at the call, alike on
    every rank; none may give a wrong result.
    """
    took = []
    for reduce_op in REDUCE_OPS:
        dtype = REDUCE_OP_DTYPES.get(reduce_op, "float32")
        try:
            globals()[op](Ctx(group_ranks=tuple(ctx.ranks), reduce_op=reduce_op, dtype=dtype, root_index=-1))
        except RuntimeError as e:
            if "not supported" not in str(e):
                raise
            continue
        took.append(reduce_op)
    return took

# -- cases about the backend as a whole ------------------------------------------

#: The op the runtime cases use: one collective that needs every rank.
PROBE = "allreduce"


def probe(ctx: Ctx, n: int | None = None):
    """Issues PROBE asynchronously and returns its Work."""
    return dist.all_reduce(ctx.data(ctx.rank, n=n), group=ctx.group, async_op=True)


def unsupported(ctx: Ctx) -> None:
    """An op the backend lacks raises a RuntimeError that names the backend and the op."""
    import pytest
    names = "|".join(["broadcast"])
    with pytest.raises(RuntimeError, match=f"Backend {BACKEND} does not support ({names})"):
        t = ctx.data(ctx.rank)
        ctx.call(dist.broadcast, t, src=ctx.root)
        ctx.check(t, ctx.data(ctx.root))


def concurrent(ctx: Ctx, threads: int = 4, repeat: int = 5) -> None:
    """PROBE from several Python threads at once: every call completes correctly.

    Every thread issues the same collective with the same data, so whichever
    thread's call a rank's call meets on another rank, the result is right.
    """
    if PROBE is None:
        raise Skip("the backend has none of the ops the runtime cases use")
    errors: list[str] = []

    def issue() -> None:
        try:
            for _ in range(repeat):
                globals()[PROBE](ctx)
        except BaseException:
            import traceback

            errors.append(traceback.format_exc())

    workers = [threading.Thread(target=issue) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert not errors, errors[0]


def async_in_place_in_order(ctx: Ctx, calls: int = 12) -> None:
    """Async all_reduces on one tensor, in place, waited for at the end: they run in order.

    Each one sums what the previous one left, as with gloo: 2 ranks end at 2^12.
    """
    if "allreduce" not in ctx.ops:
        raise Skip("needs allreduce")
    t = torch.ones(1024, dtype=torch.float64, device=ctx.device)  # world^12 stays exact
    works = [dist.all_reduce(t, group=ctx.group, async_op=True) for _ in range(calls)]
    for work in works:
        work.wait()
    expected = float(ctx.world**calls) if ctx.real else 0.0
    assert t.eq(expected).all(), f"{t[:4].tolist()} instead of {expected}"


def destroy_pending(ctx: Ctx) -> None:
    """destroy_process_group() with work pending: the work completes or fails clearly, fast."""
    # With a real backend only rank 0 calls the op, so it cannot complete.
    work = probe(ctx) if ctx.index == 0 or not ctx.real else None
    start = time.monotonic()
    dist.destroy_process_group()
    if work is not None:
        try:
            assert work.wait() is True
            assert not ctx.real, "a collective only rank 0 joined cannot succeed"
        except RuntimeError as e:  # the dummy's op may also be cancelled before it ran
            assert f"Backend {BACKEND}" in str(e) and "destroyed" in str(e), str(e)
    assert time.monotonic() - start < 20, "destroy_process_group() took too long"


def group_options(ctx: Ctx) -> None:
    """pg_options and the <NAME>_* variables reach the group; a keyword beats the variable.

    On 3 or more ranks the group given pg_options is [0, 2]: with mpi, ops::split
    derives it from the default group's communicator.
    """
    variable = ENV + "VERBOSE"
    assert variable not in os.environ, f"the test needs {variable} unset"
    assert package.group_options().verbose is False  # the default in ops.hpp
    assert repr(package.Options(verbose=True)) == "Options(verbose=True)"
    import pytest

    with pytest.raises(TypeError, match=rf"^{NAME}: Options.verbose takes a bool, not 'loud'$"):
        package.Options(verbose="loud")
    os.environ[variable] = "1"
    try:
        assert package.Options().verbose is True
        from_environment = dist.new_group(ctx.ranks)
        members = [0, 2] if ctx.world >= 3 else ctx.ranks
        given = dist.new_group(members, pg_options=package.Options(verbose=False))
        os.environ[variable] = "maybe"
        try:
            dist.new_group(ctx.ranks)
            raise AssertionError(f"{variable}=maybe was accepted")
        except RuntimeError as e:
            assert variable in str(e) and "boolean" in str(e), str(e)
    finally:
        del os.environ[variable]
    assert package.group_options(from_environment).verbose is True
    if ctx.rank in members:
        assert package.group_options(given).verbose is False
        t = ctx.data(ctx.rank)
        dist.all_reduce(t, group=given)
        ctx.check(t, sum(ctx.data(r) for r in members))


def split_groups(ctx: Ctx) -> None:
    """c10d's split makes groups [0, 2] and [1] (Backend::split, then ops::split or
    ops::init), whose all_reduce sums over their own ranks; the parent still works.

    ``dist.split_group`` itself cannot run on a CPU-only torch: it needs a bound
    accelerator (``init_process_group`` refuses ``device_id=torch.device("cpu")``:
    "device_id parameter must be an accelerator with an index", and without an
    accelerator it raises "No backend for the parent process group or its
    backend does not support splitting"). This calls what it calls after those
    checks: ``ProcessGroup.split_group``, c10d's C++ ``ProcessGroup::splitGroup``.
    """
    world = dist.group.WORLD
    assert world._get_backend(torch.device("cpu")).supports_splitting
    splits = [[0, 2], [1]]
    mine = next(ranks for ranks in splits if ctx.rank in ranks)
    groups = []
    # Three splits: c10d asks the backend once per device type it serves, and a
    # child made twice once raced its twin's bootstrap keys, now and then.
    for i in range(3):
        name = f"split{i}_" + "_".join(map(str, mine))
        group = world.split_group(mine, timeout=timedelta(seconds=60), group_name=name)
        assert group is not None, f"rank {ctx.rank} got no group"
        assert (group.rank(), group.size()) == (mine.index(ctx.rank), len(mine))
        groups.append(group)
    for i, group in enumerate(groups * 2):  # each twice: its communicator stays usable
        t = ctx.data(ctx.rank, shift=i % 8)
        group.allreduce([t]).wait()
        ctx.check(t, sum(ctx.data(r, shift=i % 8) for r in mine))
    t = ctx.data(ctx.rank, shift=1)
    dist.all_reduce(t)
    ctx.check(t, sum(ctx.data(r, shift=1) for r in range(ctx.world)))


def bad_calls(ctx: Ctx) -> None:
    """Bad arguments fail at once, on the caller's thread, naming the backend, op and reason."""
    import pytest

    pg = ctx.group or dist.group.WORLD
    here = ctx.ranks.index(ctx.rank)

    def expect(op: str, reason: str):
        pattern = rf"Backend {BACKEND} \(rank {here}\): {op}: .*{reason}"
        return pytest.raises(RuntimeError, match=pattern)

    checked = 0
    with expect("allreduce", "exactly one tensor"):
        pg.allreduce([ctx.data(0), ctx.data(0)])
    options = dist.AllreduceOptions()
    options.reduceOp = dist._make_nccl_premul_sum(2.0)
    with expect("allreduce", "not supported"):
        pg.allreduce([ctx.data(0)], options)
    checked += 1
    if not checked:
        raise Skip("none of the ops these checks use is implemented")


# -- accelerator tensors: CUDA, or the fake accelerator (tests/fake_accelerator) ---


def _fake():
    import fake_accelerator

    return fake_accelerator


def _busy(ctx: Ctx, ms: int) -> None:
    """Keeps the current stream busy for about ``ms`` milliseconds; returns at once."""
    if ctx.device.type == "cuda":
        torch.cuda._sleep(ms * 1_000_000)  # clock cycles: a millisecond at 1 GHz
    else:
        _fake().sleep(ms)


def _side_stream(ctx: Ctx):
    """A new stream of the case's device, made current inside the block."""
    if ctx.device.type == "cuda":
        return torch.cuda.stream(torch.cuda.Stream())
    return _fake().stream(_fake().new_stream())


def _synchronize(ctx: Ctx) -> None:
    """Waits until the device ran everything queued on it."""
    if ctx.device.type == "cuda":
        torch.cuda.synchronize()
    else:
        _fake().synchronize()


def _late_copies(ctx: Ctx, ms: int):
    """On the fake device, host-to-device copies land ``ms`` milliseconds late inside the block.

    A backend's results are copied to the device last: what waits for the op's
    host side only, not for its stream, then reads the old data.
    """
    if ctx.device.type == "cuda":
        import contextlib

        return contextlib.nullcontext()
    return _fake().copy_latency(ms)


def device_streams(ctx: Ctx) -> None:
    """On a side stream: busy work, a fill, the op, then a copy of its result.

    The op must read the fill's data (it waits for the caller's stream), and
    the copy must read the op's result (wait() makes the caller's stream wait
    for the op's).
    """
    if PROBE not in ("allreduce", "broadcast", "allgather"):
        raise Skip("needs allreduce, broadcast or allgather")
    with _late_copies(ctx, 200), _side_stream(ctx):
        t = torch.zeros(1 << 16, device=ctx.device)
        _busy(ctx, 100)
        t.fill_(ctx.rank + 1)
        ctx.device = t.device
        work = dist.all_reduce(t, async_op=True)
        work.wait()  # the side stream now waits for the op
        expected = float(sum(r + 1 for r in ctx.ranks)) if ctx.real else 0.0
        result = t.clone()  # queued on the side stream, after the op
    _synchronize(ctx)
    result = result.cpu()
    assert torch.all(result == expected), f"expected {expected}, got {result[:4]}"


def device_future_callbacks(ctx: Ctx) -> None:
    """A future's callback, and work queued after get_future().wait(), see the op's result.

    The caller's stream is kept busy before the op, so the op's work on its own
    stream runs late: a future completed on any other stream than the op's
    lets the callback read the tensor before the op wrote it.
    """
    with _late_copies(ctx, 200):
        t = torch.full((1 << 16,), float(ctx.rank + 1), device=ctx.device)
        _busy(ctx, 100)  # the op starts after this, on the backend's stream
        work = dist.all_reduce(t, op=dist.ReduceOp.AVG, async_op=True)
        seen = work.get_future().then(lambda fut: fut.value()[0].clone()).wait()
        after = t.clone()  # queued on the current stream once the future is waited for
        _synchronize(ctx)
    expected = sum(r + 1 for r in ctx.ranks) / len(ctx.ranks) if ctx.real else 0.0
    seen, after = seen.cpu(), after.cpu()
    assert torch.all(seen == expected), f"the callback saw {seen[:4]}, expected {expected}"
    assert torch.all(after == expected), f"after wait: {after[:4]}, expected {expected}"


def freed_while_running(ctx: Ctx) -> None:
    """Memory the caller frees once the op completed on the host is not reused before the op's stream wrote it.

    The op's results land late (the fake device's copies do), so its stream
    still writes to its tensors when the caller, which did not wait(), drops
    them. The caching allocator may give that memory to new tensors of the
    caller's stream only once the op's stream got there: the backend recorded
    its stream on the tensors (recordStream), and the free is deferred.
    """
    if ctx.device.type == "cuda":
        raise Skip("counts the fake accelerator's deferred frees")
    if PROBE is None or PROBE == "barrier":
        raise Skip("needs an op with tensors")
    fake = _fake()
    _synchronize(ctx)
    before = fake.stats()["deferred_frees"]
    with _late_copies(ctx, 300):
        work = probe(ctx)
        while not work.is_completed():  # done on the host; not waited for on the device
            time.sleep(0.001)
        del work  # and with it the op's tensors
        fresh = [torch.empty(ctx.n, dtype=ctx.dtype, device=ctx.device) for _ in range(8)]
        for t in fresh:
            t.fill_(7)
        _synchronize(ctx)
    for t in fresh:
        t = t.cpu()
        assert torch.all(t == 7), f"a tensor allocated after the op was overwritten by it: {t}"
    assert fake.stats()["deferred_frees"] > before, "no free was deferred: the backend recorded no stream"


def bench_and_a_plain_loop(ctx: Ctx, size: int, iters: int, rounds: int) -> dict | None:
    """all_reduce of ``size`` bytes timed by the benchmark module and by a plain loop, alternated.

    Returns, on rank 0, (module, loop) microseconds per call for each round,
    and how many of the module's all_reduce calls started while an earlier
    one was still running. The loop is what a user would write:
    ``dist.all_reduce(t)`` ``iters`` times.
    """
    bench = importlib.import_module(PACKAGE + ".bench")
    args = bench.parse_args([
        "--collectives", "all_reduce", "-b", str(size), "-e", str(size), "-n", str(iters),
        "-w", "3", "--check", "0", "--reference", "none", "--no-progress",
    ])  # fmt: skip
    all_reduce, works, overlapping = dist.all_reduce, [], 0

    def watched(*args, **kwargs):
        nonlocal overlapping
        overlapping += any(not work.is_completed() for work in works)
        work = all_reduce(*args, **kwargs)
        if work is not None:
            works.append(work)
        return work

    t = torch.ones(size // 4, device=args.device)
    times = []
    for _ in range(rounds):
        dist.all_reduce = watched
        try:
            rows = bench.run_sweep(args)
        finally:
            dist.all_reduce = all_reduce
        for _ in range(3):
            dist.all_reduce(t)
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        if t.is_cuda:
            torch.cuda.synchronize()
        loop = torch.tensor([(time.perf_counter() - start) / iters * 1e6])
        dist.all_reduce(loop, op=dist.ReduceOp.MAX, group=gloo_group())  # the slowest rank, as the module
        if rows is not None:
            times.append((rows[0].results[BACKEND][bench.IP].time_us, loop.item()))
    return {"rounds": times, "overlapping": overlapping} if ctx.rank == 0 else None


def run(case: str, subgroup_ranks=None, **params):
    """Entry point for harness: runs one case on this rank.

    Parameters the case function takes go to it; the others configure its Ctx.
    """
    function = globals().get(case) or getattr(importlib.import_module("faults"), case)
    accepted = inspect.signature(function).parameters
    own = {name: params.pop(name) for name in list(params) if name in accepted}
    try:
        ctx = Ctx(group_ranks=subgroup_ranks, **params)
    except _NotMember:
        return None
    try:
        return function(ctx, **own)
    except (AssertionError, RuntimeError) as e:  # a wrong result, or an op that raised
        given = ", ".join(f"{k}={v!r}" for k, v in {**own, **params}.items())
        where = f"[case {case}({given}) on rank {ctx.rank}; random data seed {ctx.seed}: {ENV}TEST_SEED={ctx.seed} repeats it]"
        raise (AssertionError if isinstance(e, AssertionError) else RuntimeError)(f"{e}\n{where}") from e
