"""A hang that explains itself: the flight recorder, its dumps, and errors naming the missing rank.

Every op is recorded in c10d's flight recorder format; when a collective
times out, its error names the ranks that never entered it, and every rank
writes its record where TORCH_FR_DUMP_TEMP_FILE says, which torch's analyser
(torchfrtrace, ``python -m torch.distributed.flight_recorder.fr_trace``) reads.
"""

import pytest
from cases import PROBE

pytestmark = pytest.mark.skipif(PROBE is None, reason="needs one of the collectives the cases use")


def test_a_completed_op_is_recorded_with_sizes_dtypes_and_duration(cluster):
    numbers = cluster.run("recorded_op")
    assert numbers == [1] * cluster.world_size, numbers


def test_the_profiler_shows_each_collective_with_its_sizes(cluster):
    cluster.run("profiled_with_sizes")
