"""Shared fixtures: one cluster of real processes per world size, for the whole session."""

import importlib
import os

import pytest
import torch
from harness import Cluster
from names import ENV, PACKAGE

package = importlib.import_module(PACKAGE)

#: World sizes every op is tested at: not only powers of two.
#: <NAME>_TEST_WORLD_SIZES=3 (comma-separated) picks others, for a quicker run.
WORLD_SIZES = [
    int(n) for n in os.environ.get(ENV + "TEST_WORLD_SIZES", "2,3").split(",")
]


def pytest_collection_modifyitems(config, items):
    """A backend not registered for cpu needs its device for the tests on CPU tensors (a GPU
    for cuda); test_devices.py runs every op on the fake accelerator all the same."""
    if "cpu" in package.DEVICES or (package.DEVICES[0] == "cuda" and torch.cuda.is_available()):
        return
    devices = " and ".join(package.DEVICES)
    need = "needs a GPU" if package.DEVICES[0] == "cuda" else f"needs a {devices} device"
    skip = pytest.mark.skip(reason=f"this backend is registered for {devices} only: {need}")
    for item in items:
        if item.name != "test_registration" and item.module.__name__ != "test_devices":
            item.add_marker(skip)


@pytest.fixture(scope="session")
def clusters():
    """The clusters of the session, by world size: started once, shared by every module."""
    started: dict[int, Cluster] = {}
    yield started
    for cluster in started.values():
        cluster.close()


@pytest.fixture(params=WORLD_SIZES, ids=lambda n: f"world{n}")
def cluster(request, clusters):
    """A process group of ``request.param`` ranks running this backend.

    Started by the first test that needs it and kept for the next ones; a test
    that broke it (a case failed or hung) gets the next test a new one.
    """
    cluster = clusters.get(request.param)
    if cluster is None or cluster.broken:
        if cluster is not None:
            cluster.close()
        cluster = clusters[request.param] = Cluster(request.param)
    return cluster


#: World sizes every op is tested at on the fake accelerator.
FAKE_WORLD_SIZES = [2, 3]


@pytest.fixture(scope="session")
def fake_library() -> str:
    """The fake accelerator (tests/fake_accelerator), built once; its library, for the ranks to load.

    Built by another process: this one keeps torch without an accelerator.
    """
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", "import fake_accelerator; print(fake_accelerator.build())"],
        cwd=os.path.dirname(os.path.abspath(__file__)), capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        pytest.fail(f"the fake accelerator did not build:\n{done.stdout}{done.stderr}")
    return done.stdout.splitlines()[-1]


@pytest.fixture(scope="session")
def fake_clusters(fake_library):
    """The clusters whose ranks have the fake accelerator, by world size."""
    started: dict[int, Cluster] = {}
    yield started
    for cluster in started.values():
        cluster.close()


@pytest.fixture(params=FAKE_WORLD_SIZES, ids=lambda n: f"world{n}")
def fake_cluster(request, fake_library, fake_clusters):
    """A process group of ``request.param`` ranks, each with the fake accelerator, kept as ``cluster`` is."""
    cluster = fake_clusters.get(request.param)
    if cluster is None or cluster.broken:
        if cluster is not None:
            cluster.close()
        cluster = fake_clusters[request.param] = Cluster(request.param, fake=fake_library)
    return cluster
