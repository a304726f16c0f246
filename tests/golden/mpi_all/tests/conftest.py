"""Shared fixtures: one cluster of real processes per world size, per test module."""

import pytest
from harness import Cluster

#: World sizes every op is tested at: not only powers of two.
WORLD_SIZES = [2, 3, 4]


@pytest.fixture(scope="module", params=WORLD_SIZES, ids=lambda n: f"world{n}")
def cluster(request):
    """A process group of ``request.param`` ranks running this backend."""
    cluster = Cluster(request.param)
    yield cluster
    cluster.close()
