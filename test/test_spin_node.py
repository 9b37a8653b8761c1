"""plag_ros.ros.nodes.spin_node, the shutdown every console node goes through, in a real process
with a real rclpy context (logical domain 35): SIGTERM alone ends it, a shutdown that hangs
ends in SHUTDOWN_DEADLINE_S with every thread's stack instead of waiting for SIGKILL, and
what a node starts after its build (the driver's bus loop) never starts in a node a Ctrl-C
cut short.
"""
from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from ros_helpers import REPO, ros_env, start_node

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


# A node whose build ends with a Ctrl-C ('build': the signal lands in its constructor, as
# one can in plag_driver's last lines), or whose start sends it ('start'); start() stands
# for the driver's bus loop (DriverNode.start_bus).
START_SCRIPT = """
import os, signal, sys
from rclpy.node import Node
from plag_ros.ros.nodes import spin_node

class Built(Node):
    def __init__(self):
        super().__init__('plag_test_built')
        if sys.argv[1] == 'build':
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(10 ** 6):      # the handler raises at the next bytecode
                pass
        print('built', flush=True)

    def start(self):
        print('started', flush=True)
        if sys.argv[1] == 'start':
            os.kill(os.getpid(), signal.SIGINT)

    def destroy_node(self):
        print('destroyed', flush=True)
        super().destroy_node()

spin_node(Built, start=Built.start)
print('returned', flush=True)
"""


@pytest.mark.parametrize('when, lines', [
    ('build', ['returned']),                            # cut short: nothing started
    ('start', ['built', 'started', 'destroyed', 'returned']),
])
def test_what_a_node_starts_after_its_build_never_runs_in_a_node_cut_short(when, lines):
    """A Ctrl-C during the build ends it with nothing started (nobody could destroy a
    half-built node, so a bus loop started there would run on with no hold at exit); one
    during start() is seen by the spin loop, and the node is destroyed; exit 0 both."""
    out = subprocess.run([sys.executable, '-c', START_SCRIPT, when], env=ros_env(35),
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == lines, (out.stdout, out.stderr)
    assert 'Traceback' not in out.stderr, out.stderr


# A node with companions (as sim_node's controller stand-ins), each saying when it is
# destroyed; with 'cut', a Ctrl-C lands while the second companion is built.
COMPANIONS_SCRIPT = """
import os, signal, sys
from rclpy.node import Node
from plag_ros.ros.nodes import spin_node

class Named(Node):
    def __init__(self, name):
        super().__init__(name)
        if name == 'plag_test_second' and sys.argv[1] == 'cut':
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(10 ** 6):      # the handler raises at the next bytecode
                pass
        print('built', name, flush=True)

    def destroy_node(self):
        print('destroyed', self.get_name(), flush=True)
        super().destroy_node()

def companions(main):
    yield Named('plag_test_first')
    yield Named('plag_test_second')

def ticking():
    node, timer = Named('plag_test_main'), []

    def tick():
        print('spinning', flush=True)
        timer[0].cancel()

    timer.append(node.create_timer(0.01, tick))
    return node

spin_node(ticking, companions=companions)
print('returned', flush=True)
"""


@pytest.mark.parametrize('when, lines', [
    ('spinning', ['built main', 'built first', 'built second', 'spinning',
                  'destroyed second', 'destroyed first', 'destroyed main', 'returned']),
    ('cut', ['built main', 'built first', 'destroyed first', 'destroyed main', 'returned']),
])
def test_companions_spin_beside_the_node_and_are_destroyed_before_it(when, lines):
    """spin_node's ``companions``: the nodes built beside the node spin on its executor
    and are destroyed before it, the last built first, on SIGTERM; a Ctrl-C while one is
    built destroys those built so far. Exit 0 both."""
    proc = subprocess.Popen([sys.executable, '-c', COMPANIONS_SCRIPT, when], env=ros_env(35),
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    if when == 'spinning':
        seen = [proc.stdout.readline().strip() for _ in range(4)]
        assert seen[-1] == 'spinning', (seen, proc.communicate(timeout=60))
        proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=SHUTDOWN_DEADLINE_S + 60)
    if when == 'spinning':
        out = '\n'.join(seen) + '\n' + out
    printed = [line.replace('plag_test_', '') for line in out.splitlines()]
    assert proc.returncode == 0, err
    assert printed == lines, (out, err)
    assert 'Traceback' not in err, err


@pytest.mark.parametrize('signals', [(signal.SIGTERM,), (signal.SIGINT, signal.SIGINT)],
                         ids=['SIGTERM', 'Ctrl-C twice'])
def test_the_simulator_and_its_stand_ins_end_on_a_signal(tmp_path, signals):
    """sim_node (the simulated arm, its controller stand-ins, the emulated controller
    manager) goes through spin_node as every node does: SIGTERM alone ends it, and so does
    Ctrl-C from a terminal under ``ros2 launch`` (two SIGINTs, the second during the
    teardown), with exit 0 and no traceback (before, it ran on rclpy's own handlers)."""
    process = start_node('sim_node', domain_id=35, log_dir=tmp_path,
                         params_file=REPO / 'config' / 'sim.yaml')
    try:
        deadline = time.monotonic() + 120.0
        while '/controller_manager' not in process.output() and process.alive() \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        assert '/controller_manager' in process.output(), process.output()[-3000:]
        time.sleep(1.0)                                   # spinning by now
        for signum in signals:
            process.process.send_signal(signum)
            time.sleep(0.01)
        code = process.process.wait(SHUTDOWN_DEADLINE_S + 60)
    finally:
        process.stop()
    output = process.output()
    print(f'\nsim_node exited {code}; its last lines:\n{process.tail(5)}')
    assert code == 0, output[-3000:]
    assert 'Traceback' not in output, output[-3000:]
