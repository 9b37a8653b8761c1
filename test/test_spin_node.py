"""plag_ros.ros.nodes.spin_node, the shutdown every console node goes through, in a real process
with a real rclpy context (logical domain 35): SIGTERM alone ends it, and a shutdown that
hangs ends in SHUTDOWN_DEADLINE_S with every thread's stack instead of waiting for SIGKILL.
"""
from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from ros_helpers import REPO, ros_env

from plag_ros.ros.nodes import SHUTDOWN_DEADLINE_S

# A node with a 100 Hz timer, which says 'spinning' at its first tick (the spin loop is
# then running); with HANG set, its destroy_node never returns (a stand-in for a shutdown
# bug: a thread that cannot be joined, a lock never released).
SCRIPT = """
import sys, threading, time
from rclpy.node import Node
from plag_ros.ros.nodes import spin_node

class Ticker(Node):
    def __init__(self):
        super().__init__('plag_test_ticker')
        self.ticks = 0
        self.create_timer(0.01, self.tick)

    def tick(self):
        self.ticks += 1
        if self.ticks == 1:
            print('spinning', flush=True)

    def destroy_node(self):
        if HANG:
            threading.Event().wait()   # never set
        super().destroy_node()

HANG = sys.argv[1] == 'hang'
spin_node(Ticker)
print('returned', flush=True)
"""


def _start(mode: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, '-c', SCRIPT, mode], env=ros_env(35), cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()     # the first tick: inside the spin loop
    assert line.strip() == 'spinning', proc.communicate(timeout=60)
    return proc


def test_sigterm_alone_ends_the_spin():
    """SIGTERM (launch's second step) is counted like Ctrl-C: the spin loop sees it within
    its poll and the node is destroyed and the context shut down in order, exit 0. (In
    time: the process itself exits with 1 once SHUTDOWN_DEADLINE_S has passed since the
    signal; how long this machine took is printed.)"""
    proc = _start('clean')
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=SHUTDOWN_DEADLINE_S + 60)
    took = time.monotonic() - sent
    print(f'\nended {took:.2f} s after SIGTERM')
    assert proc.returncode == 0, err
    assert 'returned' in out
    assert 'Traceback' not in err


def test_a_hanging_shutdown_ends_with_the_stacks():
    """Ctrl-C, then a destroy_node that never returns: exit 1 after SHUTDOWN_DEADLINE_S with
    the hanging frame on stderr, well before launch's SIGTERM at 5 s."""
    proc = _start('hang')
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=SHUTDOWN_DEADLINE_S + 60)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail('a hanging shutdown was not ended')
    took = time.monotonic() - sent
    print(f'\nended {took:.2f} s after SIGINT')
    assert proc.returncode == 1, err
    assert 'returned' not in out
    # not before the deadline (a stall of this machine can only make it later)
    assert took > SHUTDOWN_DEADLINE_S - 0.5, f'{took:.1f} s'
    assert 'in destroy_node' in err, err
