"""Accelerator tensors: every op, and the stream ordering only a device path can get wrong.

On the fake accelerator (tests/fake_accelerator: a PrivateUse1 device whose
streams really run asynchronously and whose memory the host cannot read),
built once and loaded in every rank; and on CUDA where there is a GPU.
"""

import importlib

import pytest
import torch
from cases import OPS
from harness import FAKE_DEVICE
from names import PACKAGE

package = importlib.import_module(PACKAGE)


def _why_no_cuda() -> str:
    if not torch.cuda.is_available():
        return "needs a GPU"
    if not package.WITH_CUDA:
        return "built without CUDA"
    if "cuda" not in package.DEVICES:
        return "not registered for cuda"
    return ""


cuda = pytest.mark.skipif(bool(_why_no_cuda()), reason=_why_no_cuda() or "a GPU is there")


@pytest.mark.parametrize("op", sorted(OPS))
def test_op_on_the_fake_device(fake_cluster, op):
    fake_cluster.run(op, device=FAKE_DEVICE)


def test_an_op_reads_what_the_callers_stream_wrote_and_work_after_wait_reads_its_result(fake_cluster):
    """A fill queued behind busy work on the caller's stream, the op, then a copy: each sees the one before."""
    fake_cluster.run("device_streams", device=FAKE_DEVICE)


def test_future_callbacks_see_the_result_of_the_op(fake_cluster):
    fake_cluster.run("device_future_callbacks", device=FAKE_DEVICE)


def test_tensors_freed_while_the_op_runs_are_not_reused_too_early(fake_cluster):
    fake_cluster.run("freed_while_running", device=FAKE_DEVICE)


def test_an_op_error_reaches_wait(fake_cluster):
    fake_cluster.run("device_error", device=FAKE_DEVICE)


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("async_op", [False, True], ids=["sync", "async"])
@cuda
def test_op_on_cuda_tensors(cluster, op, async_op):
    cluster.run(op, device="cuda", async_op=async_op)


@pytest.mark.parametrize("case", ["device_streams", "device_future_callbacks"])
@cuda
def test_cuda_streams(cluster, case):
    """The stream checks above, on a GPU."""
    cluster.run(case, device="cuda")
