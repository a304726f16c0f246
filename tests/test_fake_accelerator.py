"""The fake accelerator of the generated suites' device tests (template tests/fake_accelerator).

It is built from a copy of the template's package (nothing lands in the
template) with the torch running these tests, then exercised in child
processes: loading it names PrivateUse1 for good, and a host read of its
memory must kill the process that tries.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from new_backend.generate import template_dir

pytestmark = pytest.mark.build

PACKAGE = template_dir() / "{{cookiecutter.backend_name}}" / "tests" / "fake_accelerator"

# Runs in a child process with the package importable; prints one JSON object of facts.
CHECKS = """
import json, time
import torch
import fake_accelerator as fake

fake.load()
facts = {}

# Copies both ways, in several dtypes, and device to device, contiguous or not.
same = []
for dtype in (torch.float32, torch.int64, torch.bool, torch.complex64, torch.bfloat16, torch.uint8):
    host = (torch.arange(37) % 5).to(dtype)
    on = host.to("fake")
    same.append(on.device.type == "fake" and torch.equal(on.cpu(), host))
    same.append(torch.equal(on[::3].cpu(), host[::3]) and torch.equal(on.clone().cpu(), host))
facts["round_trips"] = all(same)
facts["ops"] = [
    (torch.ones(4, device="fake") + 1).cpu().tolist(),
    torch.zeros(2, device="fake").cpu().tolist(),
    torch.full((2, 3), 7, device="fake")[:, 1].cpu().tolist(),
    torch.ones(5, device="fake").sum().item(),
]

# A busy stream: work queued after a sleep returns at once and runs after it.
t = torch.zeros(1000, device="fake")
fake.synchronize()
start = time.monotonic()
fake.sleep(300)
t.fill_(3)
facts["queued_in_s"] = time.monotonic() - start
facts["idle_while_busy"] = fake.current_stream().query()
facts["value_after"] = t.cpu()[0].item()
facts["host_waited_s"] = time.monotonic() - start
facts["idle_after"] = fake.current_stream().query()

# Events order streams: the default stream waits for a side stream's event.
side = fake.new_stream()
u = torch.zeros(1000, device="fake")
fake.synchronize()
with fake.stream(side):
    fake.sleep(200)
    u.fill_(5)
    done = torch.Event(device="fake", enable_timing=True)
    done.record(side)
facts["event_done_early"] = done.query()
done.wait(fake.current_stream())
copy = u.clone()  # on the default stream, after the wait
facts["seen_through_event"] = copy.cpu()[0].item()
facts["event_done_late"] = done.query()
first = torch.Event(device="fake", enable_timing=True)
second = torch.Event(device="fake", enable_timing=True)
first.record()
fake.sleep(100)
second.record()
second.synchronize()
facts["elapsed_ms"] = first.elapsed_time(second)

# The caching allocator: a block freed on its own stream is reused at once by
# that stream; one recorded on a busy side stream only once the side stream got there.
fake.synchronize()
x = torch.empty(4096, device="fake")
address = x.data_ptr()
del x
facts["same_stream_reuse"] = torch.empty(4096, device="fake").data_ptr() == address
before = fake.stats()
x = torch.empty(8192, device="fake")
address = x.data_ptr()
with fake.stream(side):
    fake.sleep(300)
x.record_stream(side)
del x
early = torch.empty(8192, device="fake")
facts["reused_while_side_busy"] = early.data_ptr() == address
after = fake.stats()
facts["deferred_frees"] = after["deferred_frees"] - before["deferred_frees"]
fake.synchronize()
facts["reused_after_side_done"] = torch.empty(8192, device="fake").data_ptr() == address

# A host-to-device copy may land late (copy_latency), but in stream order.
v = torch.zeros(100, device="fake")
fake.synchronize()
with fake.copy_latency(300):
    start = time.monotonic()
    v.copy_(torch.full((100,), 9.0))
    facts["copy_returned_s"] = time.monotonic() - start
    facts["copy_seen"] = v.cpu()[0].item()
print(json.dumps(facts))
"""

# Reads device memory from the host: must fault.
HOST_READ = """
import ctypes, torch
import fake_accelerator as fake

fake.load()
t = torch.ones(4, device="fake")
fake.synchronize()
print(ctypes.string_at(t.data_ptr(), 4), flush=True)
"""


@pytest.fixture(scope="module")
def fake_package(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A copy of the package, built once; the folder to import it from and the environment."""
    root = tmp_path_factory.mktemp("fake")
    skip = shutil.ignore_patterns("__pycache__")
    shutil.copytree(PACKAGE, root / "fake_accelerator", ignore=skip)
    env = {
        "TORCH_EXTENSIONS_DIR": str(root / "extensions"),
        "MAX_JOBS": "2",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    start = time.monotonic()
    run_python(root, env, "import fake_accelerator; print(fake_accelerator.build())")
    print(f"fake accelerator built in {time.monotonic() - start:.1f} s")
    return root, env


def run_python(
    root: Path, env: dict[str, str], code: str, check: bool = True
) -> subprocess.CompletedProcess:
    """Runs ``code`` with python in ``root`` (the package importable), with ``env`` added."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=root, env={**os.environ, **env}, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if check:
        assert done.returncode == 0, done.stdout + done.stderr
    return done


@pytest.fixture(scope="module")
def facts(fake_package: tuple[Path, dict[str, str]]) -> dict:
    """What CHECKS found."""
    root, env = fake_package
    return json.loads(run_python(root, env, CHECKS).stdout.splitlines()[-1])


def test_the_package_renders_unchanged() -> None:
    """cookiecutter renders every template file: the package's must hold no Jinja syntax."""
    for path in PACKAGE.iterdir():
        if path.is_file() and path.suffix in (".py", ".cpp"):
            text = path.read_text()
            assert not any(s in text for s in ("{{", "{%", "{#")), f"{path.name} holds Jinja syntax"


def test_copies_round_trip_and_ops_run(facts: dict) -> None:
    assert facts["round_trips"]
    assert facts["ops"] == [[2.0] * 4, [0.0, 0.0], [7, 7], 5.0]


def test_streams_run_asynchronously(facts: dict) -> None:
    """Work queued behind a sleep returns at once; the stream is busy until the sleep ends."""
    assert facts["queued_in_s"] < 0.2
    assert facts["idle_while_busy"] is False
    assert facts["value_after"] == 3
    assert facts["host_waited_s"] >= 0.25
    assert facts["idle_after"] is True


def test_events_order_streams(facts: dict) -> None:
    assert facts["event_done_early"] is False
    assert facts["seen_through_event"] == 5
    assert facts["event_done_late"] is True
    assert 90 <= facts["elapsed_ms"] < 1000


def test_record_stream_defers_reuse(facts: dict) -> None:
    """A block used by a busy side stream is not reused before that stream reached the free."""
    assert facts["same_stream_reuse"] is True
    assert facts["reused_while_side_busy"] is False
    assert facts["deferred_frees"] == 1
    assert facts["reused_after_side_done"] is True


def test_host_to_device_copies_land_in_stream_order(facts: dict) -> None:
    assert facts["copy_returned_s"] < 0.2
    assert facts["copy_seen"] == 9


def test_host_reads_of_device_memory_fault(fake_package: tuple[Path, dict[str, str]]) -> None:
    root, env = fake_package
    done = run_python(root, env, HOST_READ, check=False)
    assert done.returncode == -signal.SIGSEGV, done.stdout + done.stderr
