"""A hang that explains itself: the flight recorder, its dumps, and errors naming the missing rank.

Every op is recorded in c10d's flight recorder format; when a collective
times out, its error names the ranks that never entered it, and every rank
writes its record where TORCH_FR_DUMP_TEMP_FILE says, which torch's analyser
(torchfrtrace, ``python -m torch.distributed.flight_recorder.fr_trace``) reads, on
every torch through ``python -m <package>.frtrace``.
"""

import importlib
import os
import pickle
from concurrent.futures import ThreadPoolExecutor

import pytest
from cases import PROBE
from names import PACKAGE

package = importlib.import_module(PACKAGE)

pytestmark = pytest.mark.skipif(PROBE is None, reason="needs one of the collectives the cases use")


def test_a_completed_op_is_recorded_with_sizes_dtypes_and_duration(cluster):
    numbers = cluster.run("recorded_op")
    assert numbers == [1] * cluster.world_size, numbers


def test_the_profiler_shows_each_collective_with_its_sizes(cluster):
    cluster.run("profiled_with_sizes")


def test_dumps_at_the_same_time_each_write_a_whole_record(tmp_path, monkeypatch):
    """Groups that time out together dump at once: each dump is whole, and no part is left behind."""
    monkeypatch.setenv("TORCH_FR_DUMP_TEMP_FILE", str(tmp_path / "trace_rank_"))

    def dump_repeatedly(_: int) -> list:
        return [package.dump_flight_record() for _ in range(200)]

    with ThreadPoolExecutor(4) as pool:
        paths = set().union(*pool.map(dump_repeatedly, range(4)))
    assert paths == {str(tmp_path / "trace_rank_0")}, paths
    assert os.listdir(tmp_path) == ["trace_rank_0"], os.listdir(tmp_path)
    with open(tmp_path / "trace_rank_0", "rb") as f:
        assert pickle.load(f)["version"] == "2.10"
