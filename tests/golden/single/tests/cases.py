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

import functools
import time

import torch
import torch.distributed as dist
from harness import BACKEND, Skip

#: The ops the backend implements.
OPS = {
    "allreduce",
}
#: Whether the backend really communicates (False: the tutorial's dummy semantics).
REAL = False

_GROUPS: dict[tuple[int, ...], object] = {}


def subgroup(ranks: tuple[int, ...]):
    """The process group of ``ranks``, created once (every rank must take part)."""
    if ranks not in _GROUPS:
        _GROUPS[ranks] = dist.new_group(list(ranks))
    return _GROUPS[ranks]


class Ctx:
    """What a case knows: who this rank is, what to send, what to expect."""

    def __init__(
        self,
        dtype: str = "float32",
        op: str = "SUM",
        root_index: int = 0,
        async_op: bool = False,
        n: int = 10,
        group_ranks: tuple[int, ...] | None = None,
        noncontiguous: bool = False,
    ):
        self.rank = dist.get_rank()
        self.group = None
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
        self.op = getattr(dist.ReduceOp, op)
        self.async_op = async_op
        self.n = n
        self.noncontiguous = noncontiguous
        self.real = REAL
        self.ops = OPS

    @property
    def next_rank(self) -> int:
        return self.ranks[(self.index + 1) % self.world]

    @property
    def prev_rank(self) -> int:
        return self.ranks[(self.index - 1) % self.world]

    # -- data ---------------------------------------------------------------

    def _layout(self, t: torch.Tensor) -> torch.Tensor:
        if not self.noncontiguous:
            return t
        strided = torch.zeros(t.numel(), 2, dtype=t.dtype)[:, 0]  # every other element
        strided.copy_(t)
        return strided

    def data(self, rank: int, shift: int = 0, n: int | None = None) -> torch.Tensor:
        """What ``rank`` sends: small integers (exact in every dtype), varying with rank and shift."""
        n = self.n if n is None else n
        values = (torch.arange(n) + 3 * rank + 5 * shift) % 3 + 1
        if self.dtype == torch.bool:
            values = values % 2
        return self._layout(values.to(self.dtype))

    def empty(self, n: int | None = None) -> torch.Tensor:
        """An output tensor, filled with a value no op produces."""
        n = self.n if n is None else n
        fill = True if self.dtype == torch.bool else 7
        return self._layout(torch.full((n,), fill, dtype=self.dtype))

    def reduce(self, tensors: list[torch.Tensor]) -> torch.Tensor:
        """The reduction of ``tensors`` with ``self.op``, computed in a wide type."""
        wide = torch.float64 if self.dtype.is_floating_point else torch.int64
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
        return result.to(self.dtype)

    def check(self, actual: torch.Tensor, expected: torch.Tensor) -> None:
        """``actual`` is ``expected`` (for the dummy: zeros shaped like ``expected``)."""
        assert actual.shape == expected.shape, f"shape {tuple(actual.shape)} != {tuple(expected.shape)}"
        assert actual.dtype == expected.dtype, f"dtype {actual.dtype} != {expected.dtype}"
        if not self.real:
            assert not actual.any(), f"{BACKEND} should zero its outputs, got {actual}"
            return
        if self.dtype.is_floating_point:
            loose = self.dtype in (torch.float16, torch.bfloat16)
            torch.testing.assert_close(
                actual, expected, rtol=1e-2 if loose else 1e-5, atol=1e-2 if loose else 1e-6
            )
        else:
            assert torch.equal(actual, expected), f"got {actual}, expected {expected}"

    # -- calling torch.distributed -----------------------------------------------

    def api(self, *names: str):
        """The first of ``names`` this torch.distributed has (names change across releases)."""
        for name in names:
            if hasattr(dist, name):
                return getattr(dist, name)
        raise AttributeError(f"torch.distributed has none of {names}")

    def finish(self, handle) -> None:
        """Checks what a call returned: nothing when synchronous, a finished handle otherwise."""
        if not self.async_op:
            assert handle is None, f"a synchronous call returned {handle!r}"
            return
        assert handle is not None, "an async_op=True call returned no handle"
        if isinstance(handle, torch._C.Future):  # some calls return a bare future
            handle.wait()
            assert handle.done()
            return
        future = handle.get_future()
        assert handle.wait() is True
        assert handle.is_completed() and handle.is_success()
        assert handle.exception() is None
        assert future.done()
        future.value()  # raises if the op failed

    def call(self, fn, *args, **kwargs) -> None:
        """Calls a collective with this case's group and async_op, and finishes it."""
        kwargs.setdefault("group", self.group)
        kwargs.setdefault("async_op", self.async_op)
        self.finish(fn(*args, **kwargs))

    def p2p(self, blocking, nonblocking, *args, **kwargs) -> None:
        """send/recv have no async_op: use isend/irecv for async cases."""
        kwargs.setdefault("group", self.group)
        if self.async_op:
            self.finish(nonblocking(*args, **kwargs))
        else:
            blocking(*args, **kwargs)

    def coalesced(self, issue) -> None:
        """Issues collectives inside torch.distributed's coalescing manager."""
        with dist._coalescing_manager(group=self.group, async_ops=self.async_op) as manager:
            issue()
        if self.async_op:
            manager.wait()

    def ring_exchange(self, tag: int) -> None:
        """Every rank sends to the next and receives from the previous one."""
        out = self.empty()
        works = [
            dist.isend(self.data(self.rank), self.next_rank, group=self.group, tag=tag),
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


# -- one case per op (from new-backend's catalogue) ----------------------------


def allreduce(ctx: Ctx) -> None:
    """Reduces the tensor of every rank; every rank gets the result."""
    t = ctx.data(ctx.rank)
    ctx.call(dist.all_reduce, t, op=ctx.op)
    ctx.check(t, ctx.reduce([ctx.data(r) for r in ctx.ranks]))


# -- cases about the backend as a whole ------------------------------------------


def unsupported(ctx: Ctx) -> None:
    """An op the backend lacks raises a RuntimeError that names the backend and the op."""
    import pytest
    names = "|".join(["broadcast"])
    with pytest.raises(RuntimeError, match=f"Backend {BACKEND} does not support ({names})"):
        t = ctx.data(ctx.rank)
        ctx.call(dist.broadcast, t, src=ctx.root)
        ctx.check(t, ctx.data(ctx.root))


def run(case: str, subgroup_ranks=None, **params):
    """Entry point for harness: runs one case on this rank."""
    try:
        ctx = Ctx(group_ranks=subgroup_ranks, **params)
    except _NotMember:
        return None
    return globals()[case](ctx)
