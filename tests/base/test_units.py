"""Unit parsing: the one place human units become SI."""

import pytest

from zionsim.base.errors import InputError
from zionsim.base.units import parse_quantity, parse_size_list


def test_bits_and_bytes():
    """Gbps are bits, GB/s bytes, GiB powers of two."""
    assert parse_quantity("200 Gbps", "bandwidth") == 25e9
    assert parse_quantity("25 GB/s", "bandwidth") == 25e9
    assert parse_quantity("40GiB", "bytes") == 40 * 2**30
    assert parse_quantity("1.5 us", "time") == pytest.approx(1.5e-6)
    assert parse_quantity(3.0, "bytes") == 3.0


def test_wrong_dimension_is_an_error():
    """A bandwidth where bytes are expected names the problem."""
    with pytest.raises(InputError, match="expected a bytes"):
        parse_quantity("200 Gbps", "bytes", field="gpu.hbm")


def test_unknown_unit():
    """Unknown units list what is allowed."""
    with pytest.raises(InputError, match="allowed"):
        parse_quantity("3 furlongs", "bytes")


def test_size_list_doubles():
    """nccl-tests size ranges double from MIN to MAX."""
    assert parse_size_list("1K:8K") == [1024, 2048, 4096, 8192]
    assert parse_size_list("1073741824:1073741824") == [2**30]


def test_size_list_is_bounded():
    """``--sizes`` stops at the bytes bound (a typo must not simulate 10^23 bytes)."""
    with pytest.raises(InputError, match="beyond any collective buffer"):
        parse_size_list("1:99999999T")
