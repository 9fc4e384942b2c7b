"""Fuzz kernel-time CSV files (line-level mutations of tests/data/kernel_times.csv).

Every case is accepted with finite outputs or refused with a one-line input error
(harness: ``tests/fuzz/harness.py``)."""

from tests.fuzz.suite import fuzz_test

test_fuzz_kernel_csv = fuzz_test("kernel_csv")
