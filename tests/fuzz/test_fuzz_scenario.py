"""Fuzz ``zionsim jobs`` scenario files (harness: ``tests/fuzz/harness.py``)."""

from tests.fuzz.suite import fuzz_test

test_fuzz_scenario = fuzz_test("scenario")
