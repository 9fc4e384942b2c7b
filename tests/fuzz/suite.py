"""The fuzz tests' common body: one hypothesis test per input kind (``test_fuzz_<kind>.py``).

Examples per kind come from :data:`EXAMPLES` (sized so that the ten kinds take about a minute
on two cores), times ``ZIONSIM_FUZZ_SCALE`` (default 1; ``bench/fuzz.py`` runs thousands and
counts outcomes instead of failing).  Cases are derandomised: the suite is repeatable.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, given, settings

from tests.fuzz.harness import outcome
from tests.fuzz.targets import kinds

#: examples per kind in the test suite: more for the kinds whose cases are cheap
EXAMPLES = {
    "topology": 200,
    "workload": 150,
    "plan": 150,
    "trace": 200,
    "sweep": 80,
    "scenario": 80,
    "kineto": 150,
    "nccl_log": 150,
    "kernel_csv": 300,
    "overrides": 150,
    "cli": 150,
}


def fuzz_test(kind: str):
    """A test that feeds :data:`EXAMPLES` fuzzed cases of ``kind`` to its target: each must be
    accepted with finite outputs or refused with a one-line InputError, within the time limit."""
    strategy, target = kinds()[kind]
    n = max(1, int(EXAMPLES[kind] * float(os.environ.get("ZIONSIM_FUZZ_SCALE", "1"))))

    @settings(
        max_examples=n,
        database=None,
        deadline=None,  # the harness's own per-case limit catches hangs (load varies)
        derandomize=True,
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        print_blob=True,
    )
    @given(strategy)
    def test(case):
        outcome(target, case)

    test.__doc__ = f"Fuzzed {kind} inputs: accepted with finite outputs or refused in one line."
    return test
