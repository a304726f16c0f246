{%- set p = project() -%}
"""Every dtype and reduce op gloo supports on CPU, checked against gloo in the same processes."""

import pytest
import torch
from cases import MATRIX_DTYPES, OPS, _bits, _first_difference


@pytest.mark.parametrize("op", sorted(OPS - {"recvAnysource", "barrier"}))
def test_dtypes_and_reduce_ops_like_gloo(cluster, op):
    required = cluster.run("matrix", op=op)[0]
    assert "float32/SUM" in required, f"{op}: nothing was compared ({required})"


@pytest.mark.parametrize("dtype", MATRIX_DTYPES)
def test_a_wrong_element_is_reported_for_every_dtype(dtype):
    """The failure message of a bit-for-bit comparison names the first wrong element, complex ones included.

    (It once raised IndexError on complex data: the rank that hit it stopped
    while the others waited, and a wrong result became a hung cluster.)
    """
    dtype = getattr(torch, dtype)
    expected = (torch.arange(6) % 2 == 1) if dtype == torch.bool else torch.arange(6).to(dtype)
    expected = expected.reshape(2, 3)
    actual = expected.clone()
    if dtype == torch.bool:
        actual[1, 2] = ~actual[1, 2]
    else:
        bits = _bits(actual)  # a view of actual; complex numbers as pairs of floats
        bits[(1, 2, 1) if dtype.is_complex else (1, 2)] ^= 1  # the lowest bit of one element
    same = _bits(actual) == _bits(expected)
    message = _first_difference(actual, expected, ~same, "bit for bit")
    assert message.startswith("1 of 6 elements differ (bit for bit); the first at (1, 2): got "), message
