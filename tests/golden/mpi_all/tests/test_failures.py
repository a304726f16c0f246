"""Failures: timeouts, a dead rank, ranks that disagree.

MPI cannot cancel a collective: after a collective timed out, its group
fails every later op at once, so these tests use a cluster of their own. A
rank that dies is noticed as a timeout (MPI has no failure detection);
mpirun must not kill the other ranks first (harness.mpirun_command).
"""

import pytest
from cases import PROBE
from harness import Cluster

pytestmark = pytest.mark.skipif(PROBE is None, reason="needs one of the collectives the cases use")

#: Short enough that timeouts come fast, long enough for this machine.
SHORT_TIMEOUT = 5.0


def test_a_rank_that_never_joins_makes_the_others_time_out():
    cluster = Cluster(3, group_timeout=SHORT_TIMEOUT)
    try:
        cluster.run("timeout")
    finally:
        cluster.kill()  # the ranks no longer agree on which op comes next


def test_a_dead_rank_makes_the_others_fail_not_hang():
    cluster = Cluster(3, group_timeout=SHORT_TIMEOUT)
    try:
        cluster.run("dead_rank", exits=frozenset({2}))
    finally:
        cluster.kill()


def test_ranks_that_disagree_on_sizes_get_a_clear_error(cluster):
    cluster.run("mismatch")
    cluster.run(PROBE)  # and the group still works
