"""Fuzz nccl-tests logs (line-level mutations of tests/data/nccl_tests_*.log).

Every case is accepted with finite outputs or refused with a one-line input error
(harness: ``tests/fuzz/harness.py``)."""

from tests.fuzz.suite import fuzz_test

test_fuzz_nccl_log = fuzz_test("nccl_log")
