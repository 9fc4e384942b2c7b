"""Fuzz topology YAML files (mutated shipped topologies, YAML attacks).

Every case is accepted with finite outputs or refused with a one-line input error
(harness: ``tests/fuzz/harness.py``)."""

from tests.fuzz.suite import fuzz_test

test_fuzz_topology = fuzz_test("topology")
