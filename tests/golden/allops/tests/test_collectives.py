"""Every op of the "allops" backend, in real processes, synchronous and async."""

import pytest
from cases import OPS

import allops_collectives


@pytest.mark.parametrize("op", sorted(OPS))
def test_op(cluster, op):
    cluster.run(op)


@pytest.mark.parametrize("op", sorted(OPS))
def test_op_async(cluster, op):
    """async_op=True returns a handle; wait(), is_completed() and get_future() work."""
    cluster.run(op, async_op=True)


@pytest.mark.parametrize("op", sorted(OPS))
def test_op_on_noncontiguous_tensors(cluster, op):
    cluster.run(op, noncontiguous=True)


def test_unsupported_op_raises_a_clear_error(cluster):
    cluster.run("unsupported")


def test_registration():
    assert allops_collectives.BACKEND_NAME == "allops"
    assert sorted(allops_collectives.OPS) == sorted(OPS)
