"""Every op of the "single" backend, in real processes, synchronous and async."""

import pytest
from cases import OPS

import single_collectives


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
    assert single_collectives.BACKEND_NAME == "single"
    assert sorted(single_collectives.OPS) == sorted(OPS)
