"""Fault cases: late, dead, stopped and disagreeing ranks, teardown from anywhere, many threads.

Each case runs on every rank of a harness.Cluster of its own (tests/test_failures.py
and tests/test_runtime.py start them), since most leave the group unusable. What
they hold the backend to, as gloo and NCCL behave: after any fault, the ranks
get correct results or a clear error naming the backend, op and reason. Never
wrong data, never a hang past the timeout, never a crash.
"""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
from cases import PROBE, Ctx, probe
from harness import BACKEND, Skip
from names import PACKAGE

#: What every later op of a group says once one of its collectives failed.
UNUSABLE = r"this process group can no longer be used since .*; destroy it and create a new one"


_SYNC: list = []


def _sync_group():
    """gloo over every rank, with a timeout longer than the cases' faults take."""
    if not _SYNC:
        _SYNC.append(dist.new_group(backend="gloo", timeout=timedelta(seconds=300)))
    return _SYNC[0]


def _timeout_s() -> float:
    """The process group's timeout, in seconds."""
    import harness

    return harness.RANK_GROUP_TIMEOUT


def _summed(ctx: Ctx, value: float) -> torch.Tensor:
    """An all_reduce of ``value`` from every rank, on a fresh group of all ranks."""
    dist.barrier(group=_sync_group())  # new_group() wants the ranks within its timeout of each other
    group = dist.new_group(ctx.ranks)
    t = torch.full((4,), value, device=ctx.device)
    dist.all_reduce(t, group=group)
    return t


def _store_keys(until_at_most: int | None = None) -> int:
    """The number of keys in the default store, once every rank got here.

    With ``until_at_most``, waits up to 2 s for the count to fall that low:
    a failed op's body cleans up just after its caller saw the error.
    """
    dist.barrier(group=_sync_group())
    store = dist.distributed_c10d._get_default_store()
    deadline = time.monotonic() + 2
    keys = store.num_keys()
    while until_at_most is not None and keys > until_at_most and time.monotonic() < deadline:
        time.sleep(0.05)
        keys = store.num_keys()
    dist.barrier(group=_sync_group())
    return keys


def _require_allreduce(ctx: Ctx) -> None:
    if "allreduce" not in ctx.ops or "barrier" not in ctx.ops:
        raise Skip("needs allreduce and barrier")


def late_rank_after_failure(ctx: Ctx) -> None:
    """The last rank queues barrier and all_reduce; rank 0 comes after the timeout.

    The other ranks time out. The late rank gets errors too, or, where the
    library completes a collective the others gave up on (MPI cannot cancel
    one), the right sum. From then on every op fails, naming the failed
    collective, instead of pairing with what another rank sent for it.
    """
    _require_allreduce(ctx)
    timeout = _timeout_s()
    # A group of its own, destroyed at the end (the default group cannot be).
    group = dist.new_group(ctx.ranks, timeout=timedelta(seconds=timeout))
    keys_before = _store_keys()
    late = ctx.index == 0
    if late:
        # After the others' errors: the timeout, then up to 4 s while they ask
        # which collective each rank reached (the flight recorder), which this
        # rank, outside the backend, does not answer.
        time.sleep(timeout + 6)
    barrier = dist.barrier(group=group, async_op=True)
    summed = torch.full((4,), 10.0**ctx.index)
    works = [barrier, dist.all_reduce(summed, group=group, async_op=True)]
    failed = False
    for work in works:
        try:
            work.wait()
        except RuntimeError as e:
            assert f"Backend {BACKEND} (rank {ctx.index})" in str(e), e
            failed = True
    assert failed or late, "an op no late rank joined succeeded"
    if not failed:
        expected = sum(10.0**i for i in range(ctx.world))
        assert summed.tolist() == [expected] * 4, summed
    t = torch.full((4,), 1000.0)
    here = rf"Backend {BACKEND} \(rank {ctx.index}\): allreduce #\d+"
    with pytest.raises(RuntimeError, match=here + (f": {UNUSABLE}" if failed else "")):
        dist.all_reduce(t, group=group)
    assert t.tolist() == [1000.0] * 4, f"a failed all_reduce wrote {t.tolist()}"
    dist.destroy_process_group(group)
    # A new group works.
    expected = sum(range(1, ctx.world + 1))
    assert _summed(ctx, ctx.index + 1).tolist() == [expected] * 4


def mismatch_leaves_group_unusable(ctx: Ctx) -> None:
    """Ranks that disagree on a collective's size get a clear error; later ops refuse."""
    import cases

    cases.mismatch(ctx)
    with pytest.raises(RuntimeError, match=rf"{PROBE} #\d+: {UNUSABLE}"):
        probe(ctx).wait()


def send_behind_a_queued_collective(ctx: Ctx) -> None:
    """Rank 0: all_reduce (async), then isend; rank 1: recv, then all_reduce.

    The send must not wait behind the all_reduce, or both ranks wait for ever.
    """
    if not {"allreduce", "send", "recv"} <= ctx.ops:
        raise Skip("needs allreduce, send and recv")
    assert ctx.world == 2, "a case for two ranks"
    t = torch.full((4,), float(ctx.index + 1))
    if ctx.index == 0:
        summed = dist.all_reduce(t, async_op=True)
        dist.isend(torch.arange(4.0) + 7, 1, tag=21).wait()
        summed.wait()
    else:
        got = torch.zeros(4)
        dist.recv(got, 0, tag=21)
        assert got.tolist() == [7.0, 8.0, 9.0, 10.0], got
        dist.all_reduce(t)
    assert t.tolist() == [3.0] * 4, t


def receive_does_not_block_receives(ctx: Ctx) -> None:
    """A receive from rank 1 (tag 1) waits while one posted after it (tag 0) completes."""
    _first_receive_waits_for_a_later_one(ctx, source=1)


def any_source_receive_does_not_block_receives(ctx: Ctx) -> None:
    """A receive from any source (tag 1) waits while one posted after it (tag 0) completes."""
    _first_receive_waits_for_a_later_one(ctx, source=None)


def _first_receive_waits_for_a_later_one(ctx: Ctx, source: int | None) -> None:
    """Rank 0: irecv from `source` (None: any) with tag 1, then irecv from rank 1 with tag 0, and wait.

    Rank 1 sends tag 0, receives rank 0's answer, and only then sends tag 1.
    A receive that holds up the receives posted after it (as a queue of
    blocking receives does) leaves both ranks waiting for each other, as MPI
    and gloo never do.
    """
    needs = {"send", "recv"} | ({"recvAnysource"} if source is None else set())
    if not needs <= ctx.ops:
        raise Skip("needs " + ", ".join(sorted(needs)))
    assert ctx.world == 2, "a case for two ranks"
    short = timedelta(seconds=_timeout_s())
    if ctx.index == 0:
        early = torch.zeros(4)
        first = dist.irecv(early, source, tag=1)
        got = torch.zeros(4)
        assert dist.irecv(got, 1, tag=0).wait(timeout=short) is True
        assert got.tolist() == [1.0, 2.0, 3.0, 4.0], got
        dist.send(got * 10, 1, tag=2)
        assert first.wait(timeout=short) is True
        if source is None:
            assert first._source_rank() == 1
        assert early.tolist() == [5.0, 6.0, 7.0, 8.0], early
    else:
        _send_then_send_again_after_the_answer(first_tag=0, then_tag=1)


def receives_match_in_posting_order(ctx: Ctx) -> None:
    """Rank 0: irecv from any source, then irecv from rank 1, one tag: the first takes rank 1's first message.

    Rank 1 sends, waits for rank 0's answer to it, and only then sends again.
    MPI matches a message with the receive posted first that matches it; a
    later receive that took it would leave both ranks waiting for each other.
    """
    needs = {"send", "recv", "recvAnysource"}
    if not needs <= ctx.ops:
        raise Skip("needs " + ", ".join(sorted(needs)))
    assert ctx.world == 2, "a case for two ranks"
    short = timedelta(seconds=_timeout_s())
    if ctx.index == 0:
        anywhere, from_one = torch.zeros(4), torch.zeros(4)
        first = dist.irecv(anywhere, None, tag=3)
        second = dist.irecv(from_one, 1, tag=3)
        assert first.wait(timeout=short) is True
        assert (first._source_rank(), anywhere.tolist()) == (1, [1.0, 2.0, 3.0, 4.0]), anywhere
        dist.send(anywhere * 10, 1, tag=2)
        assert second.wait(timeout=short) is True
        assert from_one.tolist() == [5.0, 6.0, 7.0, 8.0], from_one
    else:
        _send_then_send_again_after_the_answer(first_tag=3, then_tag=3)


def _send_then_send_again_after_the_answer(first_tag: int, then_tag: int) -> None:
    """Rank 1: sends 1..4 with `first_tag`, takes rank 0's answer (tag 2), and only then sends 5..8."""
    dist.send(torch.arange(1.0, 5.0), 0, tag=first_tag)
    answer = torch.zeros(4)
    dist.recv(answer, 0, tag=2)
    assert answer.tolist() == [10.0, 20.0, 30.0, 40.0], answer
    dist.send(torch.arange(5.0, 9.0), 0, tag=then_tag)


def timed_out_receive_takes_no_message(ctx: Ctx) -> None:
    """A receive that timed out takes no message: the next receives take them all, in order.

    Rank 0's recv (tag 9) fails at its deadline; only then does rank 1 send
    twice with that tag, and rank 0's next two receives must take the two
    messages in the order they were sent, as after a cancelled MPI_Irecv.
    """
    if not {"send", "recv"} <= ctx.ops:
        raise Skip("needs send and recv")
    assert ctx.world == 2, "a case for two ranks"
    sync = _sync_group()  # made first: new_group() wants the ranks within its timeout of each other
    if ctx.index == 0:
        with pytest.raises(RuntimeError, match=rf"Backend {BACKEND} \(rank 0\): recv #0 "):
            dist.recv(torch.zeros(4), 1, tag=9)
        dist.barrier(group=sync)
        first, second = torch.zeros(4), torch.zeros(4)
        dist.recv(first, 1, tag=9)
        dist.recv(second, 1, tag=9)
        assert (first.tolist(), second.tolist()) == ([1.0] * 4, [2.0] * 4), (first, second)
    else:
        dist.barrier(group=sync)
        dist.send(torch.full((4,), 1.0), 0, tag=9)
        dist.send(torch.full((4,), 2.0), 0, tag=9)



def completed_send_is_delivered_after_destroy(ctx: Ctx, count: int = 1 << 20) -> None:
    """Rank 1 sends 4 MiB and, once the send returned, destroys its group; rank 0 receives it a second later.

    As with gloo, a send that completed is delivered whatever its rank does
    next: 4 MiB is far above UCX's rendezvous threshold, so UCX holds the
    message until rank 0 takes it, and a send that completed when it was
    posted lost it to the teardown.
    """
    if not {"send", "recv"} <= ctx.ops or not ctx.real:
        raise Skip("needs send and recv, and a backend that moves data")
    sync = _sync_group()
    group = dist.new_group(ctx.ranks)
    sent = torch.arange(count, dtype=torch.float32)
    dist.barrier(group=sync)
    if ctx.index == 1:
        start, cpu = time.monotonic(), time.process_time()
        dist.send(sent, ctx.ranks[0], group=group, tag=4)
        took, cpu = time.monotonic() - start, time.process_time() - cpu
        dist.destroy_process_group(group)
    elif ctx.index == 0:
        time.sleep(1.5)
        got = torch.zeros(count)
        dist.recv(got, ctx.ranks[1], group=group, tag=4)
        assert torch.equal(got, sent), f"received {got[:4].tolist()}... of {sent[:4].tolist()}..."
    dist.barrier(group=sync)
    if ctx.index != 1:
        dist.destroy_process_group(group)


def posted_send_is_delivered_at_destroy(ctx: Ctx, count: int = 1 << 20) -> None:
    """Rank 1 posts a send of 4 MiB, never waits for it, and destroys its group; rank 0 receives it 1.5 s later.

    As with gloo, destroying a group delivers the sends posted on it: destroy
    waits, asleep, for each to complete or to reach its timeout.
    """
    if not {"send", "recv"} <= ctx.ops or not ctx.real:
        raise Skip("needs send and recv, and a backend that moves data")
    sync = _sync_group()
    group = dist.new_group(ctx.ranks)
    sent = torch.arange(count, dtype=torch.float32)
    dist.barrier(group=sync)
    if ctx.index == 1:
        dist.isend(sent, ctx.ranks[0], group=group, tag=5)
        start, cpu = time.monotonic(), time.process_time()
        dist.destroy_process_group(group)
        took, cpu = time.monotonic() - start, time.process_time() - cpu
    elif ctx.index == 0:
        time.sleep(1.5)
        got = torch.zeros(count)
        dist.recv(got, ctx.ranks[1], group=group, tag=5)
        assert torch.equal(got, sent), f"received {got[:4].tolist()}... of {sent[:4].tolist()}..."
    dist.barrier(group=sync)
    if ctx.index != 1:
        dist.destroy_process_group(group)


def numbering_across_op_kinds(ctx: Ctx) -> None:
    """One sequence number per group: a receive and a collective never share one."""
    if not {"recv", "allreduce"} <= ctx.ops:
        raise Skip("needs recv and allreduce")
    short = timedelta(milliseconds=200)
    received = dist.irecv(torch.zeros(2), ctx.next_rank, tag=77)
    with pytest.raises(RuntimeError, match=r": recv #0 did not complete within the 200 ms"):
        received.wait(timeout=short)
    summed = dist.all_reduce(torch.ones(2), async_op=True) if ctx.index == 0 else None
    if summed is not None:
        with pytest.raises(RuntimeError, match=r": allreduce #1 did not complete within the 200 ms"):
            summed.wait(timeout=short)


def killed_mid_collective(ctx: Ctx) -> None:
    """The last rank is killed (SIGKILL) at some point while the group runs collectives."""
    _require_allreduce(ctx)
    if ctx.index == ctx.world - 1:
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGKILL)).start()
    give_up = time.monotonic() + 60 + _timeout_s()
    i = 0
    while time.monotonic() < give_up:
        t = torch.full((1000,), float(ctx.index + i))
        try:
            dist.all_reduce(t)
        except RuntimeError as e:
            assert f"Backend {BACKEND} (rank {ctx.index}): allreduce" in str(e), e
            break
        expected = sum(range(ctx.world)) + ctx.world * i
        assert t.tolist() == [expected] * 1000, f"op {i}: {t[:4].tolist()} instead of {expected}"
        i += 1
    else:
        raise AssertionError(f"{i} collectives succeeded without the killed rank")
    with pytest.raises(RuntimeError, match=UNUSABLE):
        dist.all_reduce(torch.ones(4))


def stopped_past_the_timeout(ctx: Ctx) -> None:
    """The last rank is stopped (SIGSTOP) for longer than the timeout, mid-run."""
    _require_allreduce(ctx)
    timeout = _timeout_s()
    if ctx.index == ctx.world - 1:
        # Nobody can wake a stopped process but another one: this one asks a shell.
        subprocess.Popen(["sh", "-c", f"sleep {timeout + 2}; kill -CONT {os.getpid()}"])
        os.kill(os.getpid(), signal.SIGSTOP)
    start = time.monotonic()
    t = torch.full((4,), float(ctx.index))
    try:
        dist.all_reduce(t)
        assert t.tolist() == [float(sum(range(ctx.world)))] * 4, t
    except RuntimeError as e:
        assert f"Backend {BACKEND} (rank {ctx.index}): allreduce" in str(e), e
        assert time.monotonic() - start < timeout + 30, "the error came long after the timeout"
    if ctx.index != ctx.world - 1:
        with pytest.raises(RuntimeError, match=UNUSABLE):
            dist.all_reduce(torch.ones(4))


def destroy_from_a_callback(ctx: Ctx) -> None:
    """The last reference to a group is dropped, and the group destroyed, in a future callback."""
    if "allreduce" not in ctx.ops:
        raise Skip("needs allreduce")
    group = dist.new_group(ctx.ranks)
    t = torch.ones(4, device=ctx.device)
    work = dist.all_reduce(t, group=group, async_op=True)
    held = [group]  # the callback takes the last reference
    done = work.get_future().then(lambda fut: dist.destroy_process_group(held.pop()))
    del group, work
    done.wait()
    # The runtime goes on working, and nothing freed was touched.
    for _ in range(3):
        assert _summed(ctx, 1.0).tolist() == [float(ctx.world if ctx.real else 0)] * 4


def callbacks_that_wait_for_ops(ctx: Ctx, depth: int = 3) -> None:
    """A future callback issues an op and waits for it, three callbacks deep, as DDP's comm hooks do.

    gloo finishes this at once; a runtime that runs callbacks where it
    completes ops would wait for the nested op behind the callback that waits
    for it, past the group's timeout.
    """
    if "allreduce" not in ctx.ops:
        raise Skip("needs allreduce")

    def hook(level: int):
        def then(fut):
            inner = torch.full((4,), float(10**level * (ctx.index + 1)))
            work = dist.all_reduce(inner, async_op=True)
            if level < depth:
                work.get_future().then(hook(level + 1)).wait()
            else:
                work.get_future().wait()
            return fut.value()[0] + inner

        return then

    t = torch.full((4,), float(ctx.index + 1))
    start = time.monotonic()
    result = dist.all_reduce(t, async_op=True).get_future().then(hook(1)).wait()
    took = time.monotonic() - start
    if ctx.real:
        total = sum(range(1, ctx.world + 1))
        assert result.tolist() == [float(total * 11)] * 4, result
    assert took < _timeout_s() / 2, f"nested ops took {took:.1f} s"


def destroy_from_a_receive_callback(ctx: Ctx) -> None:
    """Rank 0 destroys a group from a receive's callback while its other receive is in flight.

    The other receive fails, saying the group was destroyed; the communicator
    is finalized only after the runtime's last look at it (MALLOC_PERTURB_
    makes a use after free show).
    """
    if not {"send", "recv"} <= ctx.ops or not ctx.real:
        raise Skip("needs send and recv, and a backend that moves data")
    group = dist.new_group(ctx.ranks)
    if ctx.index == 0:
        first, second = torch.zeros(4), torch.zeros(4)
        taken = dist.irecv(first, src=ctx.ranks[1], tag=1, group=group)
        pending = dist.irecv(second, src=ctx.ranks[1], tag=2, group=group)
        destroyed = threading.Event()

        def destroy(fut):
            dist.destroy_process_group(group)
            destroyed.set()

        taken.get_future().then(destroy)
        dist.barrier(group=_sync_group())  # rank 1 sends tag 1 only
        assert destroyed.wait(_timeout_s() / 2), "the callback did not destroy the group"
        assert first.tolist() == [1.0] * 4
        with pytest.raises(RuntimeError, match=f"Backend {BACKEND} \\(rank 0\\): recv"):
            pending.wait()
    else:
        if ctx.index == 1:
            dist.send(torch.ones(4), dst=ctx.ranks[0], tag=1, group=group)
        dist.barrier(group=_sync_group())
        dist.destroy_process_group(group)
    expected = sum(range(1, ctx.world + 1))
    if "allreduce" in ctx.ops:
        assert _summed(ctx, ctx.index + 1).tolist() == [expected] * 4


def sends_while_the_group_is_destroyed(ctx: Ctx, threads: int = 3) -> None:
    """Threads send on a group while the main thread destroys it.

    Every send completes or fails with the backend's error; none runs its
    body after the communicator was finalized (MALLOC_PERTURB_ shows one).
    """
    if not {"send", "recv"} <= ctx.ops or not ctx.real:
        raise Skip("needs send and recv, and a backend that moves data")
    # torch 2.15 hangs its flight recorder's hooks on every group of a backend
    # that does not record itself, and takes them off when the group is
    # destroyed, out of a std::map the sending threads read unlocked
    # (ProcessGroup::firePreHook): a crash inside torch (gloo's groups get no
    # hooks). TORCH_FR_BUFFER_SIZE=0 while it is created spares this group.
    size = os.environ.get("TORCH_FR_BUFFER_SIZE")
    os.environ["TORCH_FR_BUFFER_SIZE"] = "0"
    try:
        group = dist.new_group(ctx.ranks)
    finally:
        if size is None:
            del os.environ["TORCH_FR_BUFFER_SIZE"]
        else:
            os.environ["TORCH_FR_BUFFER_SIZE"] = size
    peer = ctx.ranks[(ctx.index + 1) % ctx.world]
    stop = threading.Event()

    def send() -> None:
        t = torch.ones(16)
        for _ in range(2000):
            if stop.is_set():
                return
            try:
                dist.isend(t, dst=peer, group=group)
            except (RuntimeError, ValueError):  # the group is gone, or going
                return

    senders = [threading.Thread(target=send) for _ in range(threads)]
    for sender in senders:
        sender.start()
    time.sleep(0.05)
    dist.destroy_process_group(group)
    stop.set()
    for sender in senders:
        sender.join(timeout=_timeout_s())
    assert not any(sender.is_alive() for sender in senders), "a send hung"
    dist.barrier(group=_sync_group())


def shutdown_and_abort_at_once(ctx: Ctx) -> None:
    """abort() and shutdown() of one backend, from two threads at once, while an op waits."""
    if "allreduce" not in ctx.ops:
        raise Skip("needs allreduce")
    group = dist.new_group(ctx.ranks)
    backend = group._get_backend(torch.device(ctx.device))
    pending = dist.all_reduce(torch.ones(4), group=group, async_op=True) if ctx.index == 0 else None
    time.sleep(0.2)
    start = time.monotonic()
    threads = [threading.Thread(target=backend.abort), threading.Thread(target=backend.shutdown)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert time.monotonic() - start < 10, "abort()/shutdown() took too long"
    if pending is not None and ctx.real:
        with pytest.raises(RuntimeError, match=f"Backend {BACKEND}"):
            pending.wait()


def threads_while_some_fail(ctx: Ctx, threads: int = 8, repeat: int = 5) -> None:
    """8 Python threads issue ops at once; some fail. Every result is right or a clear error."""
    if PROBE is None:
        raise Skip("the backend has none of the ops the runtime cases use")
    import cases

    errors: list[str] = []

    def correct() -> None:
        for _ in range(repeat):
            getattr(cases, PROBE)(ctx)

    def failing() -> None:
        for _ in range(repeat):
            with pytest.raises(RuntimeError, match=f"Backend {BACKEND}"):
                # Fails at once, on this thread, without touching the queues.
                dist.all_reduce(torch.ones(2, 2).to_sparse())

    def p2p(tag: int) -> None:
        if not {"send", "recv"} <= ctx.ops or not ctx.real:
            return
        for i in range(repeat):
            out = torch.zeros(3)
            sent = dist.isend(torch.full((3,), float(ctx.index * 100 + tag + i)), ctx.next_rank, tag=tag)
            dist.recv(out, ctx.prev_rank, tag=tag)
            sent.wait()
            expected = float(ctx.prev_rank * 100 + tag + i)
            assert out.tolist() == [expected] * 3, f"tag {tag} message {i}: {out.tolist()}"

    def guarded(fn, *args) -> None:
        try:
            fn(*args)
        except BaseException:
            import traceback

            errors.append(traceback.format_exc())

    jobs = [correct] * (threads - 4) + [failing, failing]
    workers = [threading.Thread(target=guarded, args=(job,)) for job in jobs]
    workers += [threading.Thread(target=guarded, args=(p2p, 30 + k)) for k in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert not errors, errors[0]


def profiled_and_timed(ctx: Ctx) -> None:
    """Ops appear in torch.profiler under the backend's name; set_timeout() applies to later ops."""
    if PROBE is None:
        raise Skip("the backend has none of the ops the runtime cases use")
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        probe(ctx).wait()
    names = {event.name for event in prof.events()}
    assert any(name.startswith(f"{BACKEND}:") for name in names), sorted(names)[:40]
    if not ctx.real:
        return
    backend = dist.group.WORLD._get_backend(torch.device(ctx.device))
    backend.set_timeout(timedelta(milliseconds=700))
    if ctx.index == 0:
        start = time.monotonic()
        with pytest.raises(RuntimeError, match=r"within (its|the op.s) 700 ms timeout"):
            probe(ctx).wait()
        assert time.monotonic() - start < 10


# -- the flight recorder ----------------------------------------------------------


def _group_entries(group: dist.ProcessGroup) -> list[dict]:
    """This rank's flight recorder entries for ``group``, oldest first."""
    package = importlib.import_module(PACKAGE)

    return [e for e in package.flight_record()["entries"] if e["process_group"][0] == group.group_name]


def recorded_op(ctx: Ctx, n: int = 37) -> int:
    """A completed PROBE is recorded with its number, sizes, dtypes, times and a real duration.

    Returns its collective number, which the test compares across ranks.
    """
    if PROBE is None:
        raise Skip("the backend has none of the ops the runtime cases use")
    group = dist.new_group(ctx.ranks)
    ctx.group = group
    probe(ctx, n=n).wait()
    start = time.monotonic()
    probe(ctx, n=n).wait()
    took_ms = (time.monotonic() - start) * 1000
    first, entry = _group_entries(group)
    assert (first["collective_seq_id"], entry["collective_seq_id"]) == (0, 1), (first, entry)
    assert entry["op_id"] == 1 and entry["record_id"] > first["record_id"] and not entry["is_p2p"], entry
    assert entry["profiling_name"] == f"{BACKEND}:" + {
        "allreduce": "all_reduce", "allgather": "all_gather", "_allgather_base": "_all_gather_base",
    }.get(PROBE, PROBE), entry
    assert entry["state"] == "completed" and entry["retired"] and entry["error"] is None, entry
    if PROBE != "barrier":
        assert [n] in entry["input_sizes"], entry
        assert set(entry["input_dtypes"]) == {"Float"} and set(entry["output_dtypes"]) == {"Float"}, entry
        assert len(entry["output_sizes"]) == len(entry["output_dtypes"]) >= 1, entry
    assert entry["time_created_ns"] <= entry["time_discovered_started_ns"] <= entry["time_discovered_completed_ns"]
    assert 0 < entry["duration_ms"] <= took_ms, (entry["duration_ms"], took_ms)
    assert entry["timeout_ms"] == int(dist.distributed_c10d._get_default_timeout(BACKEND).total_seconds() * 1000)
    package = importlib.import_module(PACKAGE)

    config = package.flight_record()["pg_config"][group.group_name]
    assert config["ranks"] == str(ctx.ranks), config
    if group in getattr(dist.distributed_c10d._world, "pg_flight_recorder_hooks", {}):
        # torch 2.15 on: c10d's own recorder, told of completions by the backend's hooks.
        import pickle

        theirs = pickle.loads(torch._C._distributed_c10d._dump_fr_trace(backend=BACKEND))["entries"]
        theirs = [e for e in theirs if e["process_group"][0] == group.group_name]
        assert len(theirs) == 2 and all(e["state"] == "completed" for e in theirs), theirs
        assert all(0 < e["duration_ms"] <= took_ms for e in theirs[1:]), theirs
    return entry["collective_seq_id"]


def profiled_with_sizes(ctx: Ctx, n: int = 37) -> None:
    """torch.profiler shows PROBE with its sizes, as it shows NCCL's collectives (record_param_comms)."""
    if PROBE in (None, "barrier"):
        raise Skip("needs a collective with tensors")
    import json
    import tempfile

    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        probe(ctx, n=n).wait()
    ours = [e for e in prof.events() if e.name.startswith(f"{BACKEND}:")]
    assert ours and any([n] in e.input_shapes for e in ours), [(e.name, e.input_shapes) for e in ours]
    with tempfile.TemporaryDirectory() as scratch:
        trace = os.path.join(scratch, "trace.json")
        prof.export_chrome_trace(trace)
        with open(trace) as f:
            events = json.load(f)["traceEvents"]
    comms = [e["args"] for e in events if e.get("name") == "record_param_comms"]
    assert any(args.get("In msg nelems") == n and args.get("dtype") == "Float" for args in comms), comms


def skipped_collective(ctx: Ctx) -> dict:
    """The last rank skips the third collective of a group; the others' errors name it.

    A rank says which collective it reached while it waits in an op of the
    backend, in any group (a healthy group sends nothing to its store between
    ops): the last rank waits in a collective of a second group, which the
    others join once they have their errors. Every rank waits until it wrote
    its flight recorder (the timeout dumps it on every rank, the skipping one
    included), and returns its error's text and the group's name.
    """
    import pytest

    if PROBE is None:
        raise Skip("the backend has none of the ops the runtime cases use")
    group = dist.new_group(ctx.ranks, timeout=timedelta(seconds=_timeout_s()))
    other = dist.new_group(ctx.ranks, timeout=timedelta(seconds=120))
    ctx.group = group
    for _ in range(2):
        probe(ctx).wait()
    last = ctx.world - 1
    message = None
    if ctx.index != last:
        with pytest.raises(RuntimeError) as error:
            probe(ctx).wait()
        message = str(error.value)
        assert f"Backend {BACKEND} (rank {ctx.index}): {PROBE} #2" in message, message
        assert f"it is collective #2 of the group; rank {last} never entered it (its last collective was #1)" in message
    ctx.group = other
    probe(ctx).wait()  # the last rank waits here for the others' errors
    ctx.group = group
    dist.barrier(group=_sync_group())
    entries = _group_entries(group)
    assert [e["collective_seq_id"] for e in entries] == ([0, 1] if ctx.index == last else [0, 1, 2]), entries
    assert [e["state"] for e in entries[:2]] == ["completed", "completed"], entries
    if ctx.index != last:
        assert entries[2]["state"] == "timed out" and entries[2]["retired"], entries[2]
        assert f"rank {last} never entered it" in entries[2]["error"], entries[2]
    dump = os.environ["TORCH_FR_DUMP_TEMP_FILE"] + str(ctx.rank)
    give_up = time.monotonic() + 30
    while not os.path.exists(dump):
        assert time.monotonic() < give_up, f"rank {ctx.rank} wrote no {dump}"
        time.sleep(0.1)
    # Dumped again now that the second group's collective completed on every
    # rank, so that the analyser finds one mismatch only: the skipped collective.
    package = importlib.import_module(PACKAGE)

    dist.barrier(group=_sync_group())
    assert package.dump_flight_record() == dump
    return {"message": message, "group": group.group_name}


def collective_skipped_outside_the_backend(ctx: Ctx) -> str | None:
    """The last rank skips a collective and waits outside the backend: the others say it did not answer.

    It has no op of the backend under way, so nothing of it talks to the
    store; the others' errors say why it cannot answer.
    """
    import pytest

    if PROBE is None:
        raise Skip("the backend has none of the ops the runtime cases use")
    group = dist.new_group(ctx.ranks, timeout=timedelta(seconds=_timeout_s()))
    ctx.group = group
    probe(ctx).wait()
    last = ctx.world - 1
    message = None
    if ctx.index != last:
        with pytest.raises(RuntimeError) as error:
            probe(ctx).wait()
        message = str(error.value)
        assert (
            f"it is collective #1 of the group; rank {last} did not say which collective it reached within 3 s "
            "(a rank answers while it waits in an op of this backend: it may be busy outside the backend, "
            "stopped, or gone)"
        ) in message, message
    dist.barrier(group=_sync_group())  # the last rank waits here, outside the backend
    return message
