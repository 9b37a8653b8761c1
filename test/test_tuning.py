"""plag_ros.ros.tuning: the opt-in process-wide measures do what they say and undo cleanly."""
from __future__ import annotations

import gc
import sys

import pytest

from plag_ros.ros import tuning


@pytest.fixture
def restore_interpreter():
    interval = sys.getswitchinterval()
    yield
    sys.setswitchinterval(interval)
    gc.unfreeze()


def test_switch_interval_is_lowered_never_raised(restore_interpreter):
    sys.setswitchinterval(5e-3)
    assert tuning.lower_switch_interval() == pytest.approx(5e-3)
    assert sys.getswitchinterval() == pytest.approx(tuning.SWITCH_INTERVAL_S)
    # already lower: left alone
    sys.setswitchinterval(1e-4)
    lower = sys.getswitchinterval()    # as the interpreter stores it (whole microseconds)
    tuning.lower_switch_interval()
    assert sys.getswitchinterval() == lower


def test_freeze_moves_live_objects_out_of_the_collector(restore_interpreter):
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    sentinel = [object()]
    frozen = tuning.freeze_startup_objects()
    # What it returns is the frozen count at its return; threads that earlier tests left
    # running may free frozen objects since (a run saw 50 of 700 680 go), none can join.
    assert 0 < gc.get_freeze_count() <= frozen
    # the live list is no longer tracked by any generation the collector scans
    assert not any(obj is sentinel for obj in gc.get_objects())
