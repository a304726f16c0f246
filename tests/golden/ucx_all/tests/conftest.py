"""Shared fixtures: one cluster of real processes per world size, per test module."""

import pytest
import torch
from harness import Cluster

import ucx_all_collectives

#: World sizes every op is tested at: not only powers of two.
WORLD_SIZES = [2, 3, 4]


def pytest_collection_modifyitems(config, items):
    """A backend registered for CUDA only needs a GPU for every test that runs ranks."""
    if "cpu" in ucx_all_collectives.DEVICES or torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="this backend is registered for cuda only and there is no GPU")
    for item in items:
        if item.name != "test_registration":
            item.add_marker(skip)


@pytest.fixture(scope="module", params=WORLD_SIZES, ids=lambda n: f"world{n}")
def cluster(request):
    """A process group of ``request.param`` ranks running this backend."""
    cluster = Cluster(request.param)
    yield cluster
    cluster.close()
