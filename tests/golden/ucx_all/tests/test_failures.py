"""Failures: timeouts, a dead rank, ranks that disagree, and a store that must not grow."""

import time

import pytest
from cases import PROBE
from harness import CASE_TIMEOUT, Cluster, ClusterError

pytestmark = pytest.mark.skipif(PROBE is None, reason="needs one of the collectives the cases use")

#: Short enough that timeouts come fast, long enough for this machine.
SHORT_TIMEOUT = 5.0


def test_a_rank_that_never_joins_makes_the_others_time_out():
    cluster = Cluster(3, group_timeout=SHORT_TIMEOUT)
    try:
        cluster.run("timeout")
    finally:
        cluster.kill()  # the ranks no longer agree on which op comes next


def test_a_wrong_result_on_one_rank_is_reported_while_the_others_wait_for_it():
    """That rank's error, naming its case, rank and seed, soon: not the others' hang."""
    cluster = Cluster(3)
    try:
        start = time.monotonic()
        with pytest.raises(ClusterError, match=r"(?s)a wrong result \(planted\).*\[case one_rank_fails\(\) on rank 0; random data seed"):
            cluster.run("one_rank_fails")
        assert time.monotonic() - start < CASE_TIMEOUT / 2, "reported at the others' timeout"
    finally:
        cluster.kill()


def test_a_dead_rank_makes_the_others_fail_not_hang():
    cluster = Cluster(3, group_timeout=SHORT_TIMEOUT)
    try:
        cluster.run("dead_rank", exits=frozenset({2}))
    finally:
        cluster.kill()
def test_ranks_that_disagree_on_sizes_get_a_clear_error_then_the_group_refuses():
    run_alone(3, "mismatch_leaves_group_unusable")


def run_alone(world_size: int, case: str, exits: frozenset[int] = frozenset(), **options) -> None:
    """Runs one fault case on a cluster of its own, which it leaves unusable."""
    cluster = Cluster(world_size, **options)
    try:
        cluster.run(case, exits=exits)
    finally:
        cluster.kill()


def test_a_late_rank_after_a_failure_gets_errors_never_wrong_data():
    """Issue scenario: a rank that comes after the timeout must not pair with failed ops."""
    run_alone(2, "late_rank_after_failure", group_timeout=2.0)


def test_a_send_never_waits_behind_queued_collectives():
    run_alone(2, "send_behind_a_queued_collective", group_timeout=SHORT_TIMEOUT)


def test_a_receive_does_not_block_the_receives_posted_after_it():
    run_alone(2, "receive_does_not_block_receives", group_timeout=SHORT_TIMEOUT)


def test_a_receive_from_any_source_does_not_block_other_receives():
    run_alone(2, "any_source_receive_does_not_block_receives", group_timeout=SHORT_TIMEOUT)


def test_receives_take_messages_in_the_order_they_were_posted():
    run_alone(2, "receives_match_in_posting_order", group_timeout=SHORT_TIMEOUT)


def test_a_receive_that_timed_out_takes_no_message():
    run_alone(2, "timed_out_receive_takes_no_message", group_timeout=SHORT_TIMEOUT)


def test_a_completed_send_is_delivered_after_the_sender_destroys_its_group(cluster):
    cluster.run("completed_send_is_delivered_after_destroy")


def test_a_posted_send_is_delivered_when_its_group_is_destroyed(cluster):
    cluster.run("posted_send_is_delivered_at_destroy")


def test_destroy_waits_for_an_undelivered_send_until_its_timeout_only():
    run_alone(2, "undelivered_send_holds_destroy_until_its_timeout")


def test_a_receive_given_up_on_mid_message_never_writes_after_failing():
    run_alone(2, "receive_given_up_on_mid_message", group_timeout=2.0, env={"UCX_RNDV_THRESH": "inf"})


def test_one_sequence_number_per_group():
    run_alone(2, "numbering_across_op_kinds", group_timeout=SHORT_TIMEOUT)


def test_a_rank_killed_mid_collective():
    run_alone(3, "killed_mid_collective", exits=frozenset({2}), group_timeout=3.0)


def test_a_rank_stopped_past_the_timeout():
    run_alone(3, "stopped_past_the_timeout", group_timeout=3.0)


def test_eight_threads_while_some_ops_fail():
    run_alone(3, "threads_while_some_fail")
