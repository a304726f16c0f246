"""CUDA tensors: every op on the GPU, and stream ordering. Skipped without a GPU."""

import pytest
import torch
from cases import OPS

import store_all_collectives

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU"),
    pytest.mark.skipif(not store_all_collectives.WITH_CUDA, reason="built without CUDA"),
    pytest.mark.skipif("cuda" not in store_all_collectives.DEVICES, reason="not registered for cuda"),
]


@pytest.mark.parametrize("op", sorted(OPS))
def test_op_on_cuda_tensors(cluster, op):
    cluster.run(op, device="cuda")


@pytest.mark.parametrize("op", sorted(OPS))
def test_op_on_cuda_tensors_async(cluster, op):
    cluster.run(op, device="cuda", async_op=True)


def test_ops_follow_the_callers_stream(cluster):
    """Inputs written on a side stream are read after the write; results are ready after wait()."""
    cluster.run("cuda_streams")


def test_future_callbacks_see_the_result_of_the_op(cluster):
    """The future completes on the op's stream: its callbacks are ordered after the op."""
    cluster.run("cuda_future_callbacks")
