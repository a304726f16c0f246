"""Every op of the backend (names.py), in real processes: sync, async, odd layouts, subgroups."""

import importlib

import pytest
from cases import OPS, REDUCING
from harness import Cluster
from names import NAME, PACKAGE

package = importlib.import_module(PACKAGE)

@pytest.mark.parametrize("op", sorted(OPS))
def test_op(cluster, op):
    cluster.run(op)


@pytest.mark.parametrize("op", sorted(OPS))
def test_op_async(cluster, op):
    """async_op=True: wait(), is_completed(), result(), get_future() and .then() work."""
    cluster.run(op, async_op=True)


@pytest.mark.parametrize("op", sorted(OPS))
def test_op_on_noncontiguous_tensors(cluster, op):
    cluster.run(op, noncontiguous=True)


@pytest.mark.parametrize("op", sorted(OPS - {"barrier"}))
def test_op_in_the_shapes_real_clients_use(cluster, op):
    """Random data holding each dtype's extremes; zero elements, odd sizes, 2-D, offset
    views; input and output aliased as FSDP2 has them."""
    cluster.run("shapes", op=op)


@pytest.mark.parametrize("op", sorted(OPS))
def test_op_with_the_middle_and_last_rank_as_root(cluster, op):
    """Roots other than rank 0 (test_op's): the middle rank where there is one, and the last."""
    if cluster.world_size > 2:
        cluster.run(op, root_index=cluster.world_size // 2)
    cluster.run(op, root_index=-1)


@pytest.mark.parametrize("op", sorted(OPS))
def test_op_in_subgroups(cluster, op):
    """new_group(): a group of some ranks (not the first ones), using their global ranks;
    with every reduce op the backend takes (AVG divides by the group's size)."""
    if cluster.world_size < 3:
        pytest.skip("needs 3 ranks for a proper subgroup")
    groups = [(0, 2)] if cluster.world_size == 3 else [(0, 2), (1, 2, 3)]
    for ranks in groups:
        cluster.run(op, subgroup_ranks=ranks, root_index=-1)
        if op in REDUCING:
            took = [t for t in cluster.run("every_reduction", op=op, subgroup_ranks=ranks) if t is not None]
            assert len(took) == len(ranks) and all(t == took[0] for t in took), took
            assert "SUM" in took[0], f"{op} took no reduce op on the group {ranks}: {took[0]}"


def test_recv_takes_the_message_of_its_source(cluster):
    """Two ranks send to one with the same tag: each receive gets its own source's message."""
    if cluster.world_size < 3:
        pytest.skip("needs 3 ranks: two senders and a receiver")
    cluster.run("recv_from_each_source")


def test_recv_matches_messages_by_tag(cluster):
    """Two messages between the same two ranks, received in the other order: each by its tag."""
    cluster.run("recv_by_tag")


def test_ops_on_large_tensors():
    """Tensors of just over 10 MiB each, an odd number of elements: more than
    one message of many transports holds (a TCPStore value, for one, is at most
    8 MiB), and no whole number of them."""
    cluster = Cluster(2)
    try:
        cluster.run_each(sorted(OPS), n=10 * 2**20 // 4 + 3)
    finally:
        cluster.close()


def test_ops_from_several_python_threads(cluster):
    cluster.run("concurrent")


def test_async_ops_on_one_tensor_run_in_order(cluster):
    cluster.run("async_in_place_in_order")


def test_unsupported_op_raises_a_clear_error(cluster):
    cluster.run("unsupported")


def test_bad_calls_fail_at_once_with_a_clear_error(cluster):
    cluster.run("bad_calls")


def test_registration():
    assert package.BACKEND_NAME == NAME
    assert sorted(package.OPS) == sorted(OPS)
