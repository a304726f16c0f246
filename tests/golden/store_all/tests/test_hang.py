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
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from cases import PROBE
from harness import BACKEND, Cluster
from names import PACKAGE

package = importlib.import_module(PACKAGE)

pytestmark = pytest.mark.skipif(PROBE is None, reason="needs one of the collectives the cases use")

#: Short enough that the timeout comes fast, long enough for this machine.
SHORT_TIMEOUT = 5.0


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


# (The dummy's collectives exchange nothing: a rank that skips one leaves no one waiting.)
def test_a_skipped_collective_is_named_in_the_errors_and_in_every_rank_s_dump(tmp_path):
    """Rank 2 skips collective #2: ranks 0 and 1 say so, and so do all three dumps and torch's analyser."""
    prefix = tmp_path / "trace_rank_"
    cluster = Cluster(3, group_timeout=SHORT_TIMEOUT, env={"TORCH_FR_DUMP_TEMP_FILE": str(prefix)})
    try:
        results = cluster.run("skipped_collective")
    finally:
        cluster.kill()
    messages = [result["message"] for result in results]
    assert messages[2] is None and all("rank 2 never entered it" in m for m in messages[:2]), messages
    (name,) = {result["group"] for result in results}

    reached = {}
    for rank in range(3):
        with open(f"{prefix}{rank}", "rb") as f:
            dump = pickle.load(f)
        assert dump["version"] == "2.10" and set(dump) >= {"pg_config", "pg_status", "entries"}, dump.keys()
        assert dump["pg_config"][name]["ranks"] == "[0, 1, 2]", dump["pg_config"]
        entries = [e for e in dump["entries"] if e["process_group"][0] == name]
        assert all(e["profiling_name"].startswith(f"{BACKEND}:") for e in entries), entries
        reached[rank] = max(e["collective_seq_id"] for e in entries)
        # Where the rank was in the program when it issued its last collective.
        callers = [(frame["name"], os.path.basename(frame["filename"])) for frame in entries[-1]["frames"]]
        assert ("skipped_collective", "faults.py") in callers, entries[-1]["frames"]
        if rank < 2:
            assert entries[-1]["state"] == "timed out", entries[-1]
            assert "rank 2 never entered it" in entries[-1]["error"], entries[-1]
    assert reached == {0: 2, 1: 2, 2: 1}, reached

    # Torch's analyser reads them, through the package's reader on every torch
    # (before 2.15 the analyser knows only NCCL's, gloo's and a few other names).
    analysis = subprocess.run(
        [sys.executable, "-m", PACKAGE + ".frtrace", str(tmp_path)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    report = analysis.stdout + analysis.stderr
    assert analysis.returncode == 0, report
    assert "gloo:" not in report, report  # the stand-in name is never shown
    assert "Not all ranks joining collective, sequence number: 2" in report, report
    assert "missing ranks: {2}" in report, report
    assert re.search(r"skipped_collective at \S*faults\.py:\d+", report), report  # where each rank was


def test_a_rank_outside_the_backend_is_said_not_to_answer():
    """The skipping rank waits in gloo, not in this backend: it does not answer, and the others say why."""
    cluster = Cluster(3, group_timeout=SHORT_TIMEOUT)
    try:
        messages = cluster.run("collective_skipped_outside_the_backend")
    finally:
        cluster.kill()
    assert messages[2] is None and all(messages[:2]), messages
