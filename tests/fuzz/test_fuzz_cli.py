"""Fuzz command lines of `zionsim run|collective|topology`.

Every case is accepted with finite outputs or refused with a one-line input error
(harness: ``tests/fuzz/harness.py``)."""

from tests.fuzz.suite import fuzz_test

test_fuzz_cli = fuzz_test("cli")
