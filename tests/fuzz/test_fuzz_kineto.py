"""Fuzz Kineto (PyTorch profiler) traces (mutated tests/data/kineto_tiny.json).

Every case is accepted with finite outputs or refused with a one-line input error
(harness: ``tests/fuzz/harness.py``)."""

from tests.fuzz.suite import fuzz_test

test_fuzz_kineto = fuzz_test("kineto")
