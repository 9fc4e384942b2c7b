"""Fuzz workload YAML files (mutated shipped workloads, YAML attacks).

Every case is accepted with finite outputs or refused with a one-line input error
(harness: ``tests/fuzz/harness.py``)."""

from tests.fuzz.suite import fuzz_test

test_fuzz_workload = fuzz_test("workload")
