"""Shared fixtures: one cluster of real processes per world size, for the whole session."""

import pytest
import torch
from harness import Cluster

import mpi_all_collectives

#: World sizes every op is tested at: not only powers of two.
WORLD_SIZES = [2, 3, 4]


def pytest_collection_modifyitems(config, items):
    """A backend registered for CUDA only needs a GPU for every test that runs ranks."""
    if "cpu" in mpi_all_collectives.DEVICES or torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="this backend is registered for cuda only and there is no GPU")
    for item in items:
        if item.name != "test_registration":
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
