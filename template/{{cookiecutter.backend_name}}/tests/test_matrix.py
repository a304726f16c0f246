{%- set p = project() -%}
"""Every dtype and reduce op gloo supports on CPU, checked against gloo in the same processes."""

import pytest
from cases import OPS


@pytest.mark.parametrize("op", sorted(OPS - {"recvAnysource", "barrier"}))
def test_dtypes_and_reduce_ops_like_gloo(cluster, op):
    compared = cluster.run("matrix", op=op)[0]
    assert compared, f"{op}: gloo accepted no combination, so nothing was compared"
