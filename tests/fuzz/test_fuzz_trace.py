"""Fuzz trace files (mutated lowered traces, JSON with NaN and cut short).

Every case is accepted with finite outputs or refused with a one-line input error
(harness: ``tests/fuzz/harness.py``)."""

from tests.fuzz.suite import fuzz_test

test_fuzz_trace = fuzz_test("trace")
