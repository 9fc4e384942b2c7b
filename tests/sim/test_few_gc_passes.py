"""``sim.run.few_gc_passes``: nested blocks leave the collector to the outer one, and the
outer one puts back what it changed (thresholds, frozen objects)."""

import gc

from zionsim.sim.run import few_gc_passes


def test_nested_blocks_leave_all_to_the_outer():
    before = gc.get_threshold()
    with few_gc_passes():
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (100_000, 50, 100)
        with few_gc_passes():
            pass
        assert gc.get_freeze_count() > 0  # the inner exit did not unfreeze (it set 0)
        assert gc.get_threshold() == (100_000, 50, 100)
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
