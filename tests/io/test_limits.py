"""The memory limit of the resource guard: option, environment variable, available RAM."""

from __future__ import annotations

import pytest

from zionsim.base.errors import InputError
from zionsim.io import limits


def test_option_wins_over_environment_and_none_disables(monkeypatch):
    """--max-memory first, then $ZIONSIM_MAX_MEMORY; `none` means no limit."""
    monkeypatch.setenv(limits.ENV_MAX_MEMORY, "2GiB")
    assert limits.memory_limit("1GiB") == 2.0**30
    assert limits.memory_limit() == 2.0**31
    assert limits.memory_limit("none") is None
    monkeypatch.setenv(limits.ENV_MAX_MEMORY, "off")
    assert limits.memory_limit() is None


def test_default_is_the_available_memory_shared(monkeypatch):
    """Without option or variable: the available memory, divided among `share` runs."""
    monkeypatch.delenv(limits.ENV_MAX_MEMORY, raising=False)
    avail = limits.available_memory_bytes()
    assert avail is not None and avail > 0
    assert limits.memory_limit(share=4) == pytest.approx(avail / 4, rel=0.2)


@pytest.mark.parametrize("text", ["-1GiB", "0", "lots", "3 Gbps"])
def test_bad_limits_are_input_errors(text):
    """Negative, zero, unreadable or non-size limits name the field."""
    with pytest.raises(InputError, match="--max-memory"):
        limits.memory_limit(text)
