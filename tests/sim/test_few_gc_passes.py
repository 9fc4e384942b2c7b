"""``sim.run.few_gc_passes``: nested blocks leave the collector to the outer one, and the
outer one puts back what it changed (thresholds, frozen objects, numpy's huge-page advice)."""

import gc

import pytest

from zionsim.sim.run import _madvise_hugepage, few_gc_passes


def test_nested_blocks_leave_all_to_the_outer():
    before = gc.get_threshold()
    with few_gc_passes():
        frozen = gc.get_freeze_count()
        assert gc.get_threshold() == (100_000, 50, 100)
        with few_gc_passes():
            assert gc.get_freeze_count() == frozen
        assert gc.get_freeze_count() == frozen  # the inner exit did not unfreeze
        assert gc.get_threshold() == (100_000, 50, 100)
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


@pytest.mark.parametrize("advice", [True, False])
def test_huge_page_advice_off_inside_and_put_back(advice):
    was = _madvise_hugepage(advice)
    if was is None:
        pytest.skip("this numpy has no huge-page switch")
    try:
        with few_gc_passes():
            assert _madvise_hugepage(False) is False  # setting it returns what it was: off
        assert _madvise_hugepage(advice) is advice  # put back as it was before the block
    finally:
        _madvise_hugepage(was)
