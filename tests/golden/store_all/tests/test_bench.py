"""The benchmark module runs a small sweep end to end and reports what it measured."""

import json
import os
import subprocess
import sys

from harness import Cluster

from store_all_collectives import bench


def test_bench_sweeps_every_collective_and_checks_results(tmp_path):
    out = tmp_path / "bench"
    result = subprocess.run(
        [sys.executable, "-m", "store_all_collectives.bench", "--nprocs", "2", "-b", "8", "-e", "2K",
         "-f", "16", "-n", "2", "-w", "1", "--out", str(out)],
        capture_output=True, text=True, timeout=600, env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    table = result.stdout
    assert "# Avg bus bandwidth" in table, table
    data = json.loads(out.with_suffix(".json").read_text())
    assert data["meta"]["world_size"] == 2
    rows = data["rows"]
    assert {row["collective"] for row in rows} == set(bench.available())
    assert {row["size"] for row in rows if row["collective"] == "all_reduce"} <= {8, 128, 2048}
    wrong = sum(
        r["wrong"] for row in rows for place in row["results"]["store_all"].values()
        for r in [place] if r["wrong"] is not None
    )  # fmt: skip
    assert wrong == 0 and "# Out of bounds values : 0 OK" in table, table
    for row in rows:
        gloo = row["results"].get("gloo")
        assert gloo is not None, row


# At least some milliseconds per round, so that one preemption does not decide it.
SIZE, ITERS = 1 << 20, 10


def test_bench_reports_what_a_plain_loop_measures():
    """The module's all_reduce time agrees with a plain ``dist.all_reduce`` loop's.

    Both run in the same two processes, alternated over 5 rounds, and both
    take the slowest rank's time. Load from other processes only adds time, so
    the fastest round of each is the least disturbed estimate of what a call
    costs: they must agree within 1.5x either way. On this project's 2-core CI machine, loaded to 7x its
    cores by other builds, they agreed within 0.89-1.14x. The module once
    issued all its calls asynchronously and waited at the end: an MPI library
    then ran them concurrently, on one buffer, and at 16 MiB the module
    reported 1.7x less bandwidth than the loop.
    """
    cluster = Cluster(2)
    try:
        rounds = cluster.run("bench_and_a_plain_loop", size=SIZE, iters=ITERS, rounds=5)[0]
    finally:
        cluster.close()
    module = min(m for m, _ in rounds)
    loop = min(plain for _, plain in rounds)
    assert loop / 1.5 <= module <= loop * 1.5, f"module {module:.0f} us, plain loop {loop:.0f} us per call: {rounds}"
