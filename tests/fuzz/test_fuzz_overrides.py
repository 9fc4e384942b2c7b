"""Fuzz `--set PATH=VALUE` overrides of `zionsim run`.

Every case is accepted with finite outputs or refused with a one-line input error
(harness: ``tests/fuzz/harness.py``)."""

from tests.fuzz.suite import fuzz_test

test_fuzz_overrides = fuzz_test("overrides")
