"""Every dtype and reduce op gloo supports on CPU, checked against gloo in the same processes."""

import pytest
from cases import OPS


@pytest.mark.parametrize("op", sorted(OPS - {"recvAnysource", "barrier"}))
def test_dtypes_and_reduce_ops_like_gloo(cluster, op):
    required = cluster.run("matrix", op=op)[0]
    assert "float32/SUM" in required, f"{op}: nothing was compared ({required})"
