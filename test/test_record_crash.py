"""``plag-ros record`` killed with SIGKILL over DDS (logical domain 66).

This test's node publishes numbered ``/joint_states`` at 100 Hz; the real ``plag-ros
record`` runs in a subprocess and is killed once its bag holds 1.5 s of messages. What
:func:`plag_ros.io.bag.open_bag` salvages must then be every message from the first one the
recorder received, without a gap, up to one the recorder received at most 1 s before the
kill (by its own receive stamp, the bag's: the delivery from this test's publisher to the
recorder is the machine's, not the recorder's promise).
"""
from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

import pytest
from ros_helpers import REPO, RosClient, ros_env
from sensor_msgs.msg import JointState

from plag_ros.io.bag import open_bag, recovery_of, typestore_for

DOMAIN_ID = 66
RATE_HZ = 100.0
LOSS_BOUND_S = 1.0        # the promise: a crash loses at most the last second


def _salvaged(bag) -> list[tuple[int, int]]:
    """(sequence number (position[0]), the recorder's receive stamp [ns]) of the
    /joint_states messages readable now."""
    store = typestore_for('kilted')
    try:
        with open_bag(bag) as reader:
            return [(int(store.deserialize_cdr(raw, 'sensor_msgs/msg/JointState').position[0]),
                     int(t_ns))
                    for c, t_ns, raw in reader.messages() if c.topic == '/joint_states']
    except Exception:  # noqa: BLE001 - nothing whole on disk yet
        return []


@pytest.mark.parametrize('storage', ['mcap', 'sqlite3'])
def test_killed_recorder_loses_at_most_the_last_second(tmp_path, storage):
    bag = tmp_path / 'rec'
    published: dict[int, int] = {}
    stop = threading.Event()
    with RosClient(DOMAIN_ID, 'plag_record_crash_test') as client:
        pub = client.publisher(JointState, '/joint_states')
        recorder = subprocess.Popen(
            [sys.executable, '-m', 'plag_ros.apps.cli', 'record', str(bag), '--storage', storage],
            env=ros_env(DOMAIN_ID), cwd=REPO, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)

        def publish() -> None:
            k, start = 0, time.monotonic()
            while not stop.is_set():
                msg = JointState(name=['seq'], position=[float(k)])
                published[k] = time.time_ns()
                pub.publish(msg)
                k += 1
                stop.wait(max(0.0, start + k / RATE_HZ - time.monotonic()))

        thread = threading.Thread(target=publish, daemon=True)
        try:
            client.wait_for_subscribers(pub, 1, timeout=60.0)
            thread.start()
            client.wait_for(lambda: len(_salvaged(bag)) >= 1.5 * RATE_HZ, 60.0,
                            "1.5 s of messages in the recorder's bag")
        finally:
            recorder.send_signal(signal.SIGKILL)
            recorder.wait(timeout=30)
            t_kill = time.time_ns()
            stop.set()
            thread.join(timeout=10)
    salvaged = _salvaged(bag)
    seq = [k for k, _ in salvaged]
    assert seq == list(range(seq[0], seq[0] + len(seq))), 'a gap in the recovered messages'
    before_kill = [k for k, t in published.items() if t <= t_kill]
    assert seq[-1] <= max(before_kill)
    lost_s = (t_kill - salvaged[-1][1]) * 1e-9
    print(f'\nlast recovered message received {lost_s:.3f} s before the kill, published '
          f'{(t_kill - published[seq[-1]]) * 1e-9:.3f} s before it')
    with open_bag(bag) as reader:
        report = recovery_of(reader)
    assert report is not None and report.lossy
    assert lost_s <= LOSS_BOUND_S, f'last recovered message {lost_s:.3f} s before the kill; ' \
        f'{report.summary()}'
