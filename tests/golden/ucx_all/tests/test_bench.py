"""The benchmark module runs a small sweep end to end and reports what it measured."""

import json
import os
import subprocess
import sys

from ucx_all_collectives import bench


def test_bench_sweeps_every_collective_and_checks_results(tmp_path):
    out = tmp_path / "bench"
    result = subprocess.run(
        [sys.executable, "-m", "ucx_all_collectives.bench", "--nprocs", "2", "-b", "8", "-e", "2K",
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
        r["wrong"] for row in rows for place in row["results"]["ucx_all"].values()
        for r in [place] if r["wrong"] is not None
    )  # fmt: skip
    assert wrong == 0 and "# Out of bounds values : 0 OK" in table, table
    for row in rows:
        gloo = row["results"].get("gloo")
        assert gloo is not None, row
