"""The Perfetto trace's times are worked on whole arrays (``sim.perfetto.span_times``): the
same text as Python's ``round`` and ``repr`` of each span, value by value, wherever rounding
is hard (exact ties, the values either side of a tie, signed zeros, the end of the exact
range, values past it)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import zionsim.sim.perfetto as perfetto
from zionsim.sim.perfetto import EXACT_US, _ns_text, _round_ns, span_times


def _python(start_s: float, end_s: float) -> tuple[str, str]:
    """What the trace held before: one span at a time, in Python."""
    ts = round(start_s * 1e6, 3)
    dur = round(round(end_s * 1e6, 3) - ts, 3)
    return json.dumps(ts), json.dumps(dur)


def _hard_values() -> np.ndarray:
    rng = np.random.default_rng(7)
    ties = np.arange(-2000, 2000) / 16.0  # x * 1000 a half: ties broken to even
    halves = (np.arange(0, 5000) + 0.5) / 1000.0  # decimal ties, not exact in binary
    sides = [-np.inf, np.inf]
    near = np.concatenate([np.nextafter(v[:, None], sides).ravel() for v in (ties, halves)])
    spread = np.concatenate(
        [rng.uniform(0, 10.0**k, 2000) for k in range(-4, 13)]
        + [-rng.uniform(0, 10.0**k, 200) for k in range(-4, 13)]
        + [rng.integers(0, 10**9, 2000) / 1000.0, rng.integers(0, 10**12, 2000) / 8.0]
    )
    edges = [0.0, -0.0, 1e-310, -1e-310, 4e-4, -4e-4, 5e-4, 6e-4, EXACT_US, -EXACT_US,
             np.nextafter(EXACT_US, 0), 1e15, 1e300, -1e300, np.inf, -np.inf, np.nan]  # fmt: skip
    return np.concatenate([ties, halves, near, spread, edges])


@pytest.mark.parametrize("whole_arrays", [True, False])
def test_rounded_microseconds_are_pythons(whole_arrays, monkeypatch):
    """Value by value in microseconds (where the ties are exact): ``round(x, 3)``, its
    ``repr`` (numpy's text arrays, or one value at a time where numpy has none), and which
    values are left to Python."""
    if not whole_arrays:
        monkeypatch.setattr(perfetto, "_TEXT", None)
    us = _hard_values()
    with np.errstate(all="ignore"):
        value, ns, ok = _round_ns(us)
    text = _ns_text(value, ns)
    for x, v, t, done in zip(us.tolist(), value.tolist(), text, ok.tolist(), strict=True):
        assert done == (abs(x) < EXACT_US)
        if done:
            want = round(x, 3)
            assert (v, np.signbit(v)) == (want, np.signbit(want)), x
            assert t == repr(want), x


def test_span_times_are_pythons_round_and_repr():
    us = _hard_values()
    start = us / 1e6
    rng = np.random.default_rng(11)
    # ends: the start plus a duration, another hard value, or the start itself
    end = np.concatenate([start[1:], start[:1]])
    end = np.where(rng.random(len(start)) < 0.5, start + rng.uniform(0, 1e-3, len(start)), end)
    end[::97] = start[::97]
    ts, dur = span_times(start, end)
    want = [_python(a, b) for a, b in zip(start.tolist(), end.tolist(), strict=True)]
    assert list(zip(ts, dur, strict=True)) == want


def test_span_times_of_no_spans():
    assert span_times(np.zeros(0), np.zeros(0)) == ([], [])
