"""plag_ros.ros.nodes.spin_node, the shutdown every console node goes through, in a real process
with a real rclpy context (logical domain 35): SIGTERM alone ends it, a shutdown that hangs
ends in SHUTDOWN_DEADLINE_S with every thread's stack instead of waiting for SIGKILL, what
a node starts after its build (the driver's bus loop) never starts in a node a Ctrl-C cut
short, a node's own shutdown hook (the controller's hand-back) runs however the spin ended,
and every node ends on SIGTERM and on Ctrl-C twice.
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
# then running).
TICKER = """
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
"""

# With 'hang', its destroy_node never returns (a stand-in for a shutdown bug: a thread that
# cannot be joined, a lock never released).
SCRIPT = TICKER + """
class Hanging(Ticker):
    def destroy_node(self):
        if sys.argv[1] == 'hang':
            threading.Event().wait()   # never set
        super().destroy_node()

spin_node(Hanging)
print('returned', flush=True)
"""

def _start(mode: str) -> subprocess.Popen:
    return _start_script(SCRIPT, mode)


def _start_script(script: str, mode: str) -> subprocess.Popen:
    """``script`` with argument ``mode`` in a process of its own, once it prints that its
    node spins."""
    proc = subprocess.Popen([sys.executable, '-c', script, mode], env=ros_env(35), cwd=REPO,
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


# Every console node and what it logs once built and spinning (its 'ready' line); each
# reads its model from the bundled URDF (no robot_description on this test's graph).
NODES = {
    'sim_node': ('sim.yaml', {}, '/controller_manager'),
    'dynamics_node': ('crane_x7.yaml', {'robot_description_source': 'file'}, "model 'crane_x7'"),
    'impedance_node': ('impedance.yaml', {'robot_description_source': 'file'}, 'to start'),
}


@pytest.mark.parametrize('signals', [(signal.SIGTERM,), (signal.SIGINT, signal.SIGINT)],
                         ids=['SIGTERM', 'Ctrl-C twice'])
@pytest.mark.parametrize('module', NODES)
def test_every_node_ends_on_a_signal(tmp_path, module, signals):
    """Every node goes through spin_node: SIGTERM alone (launch's second step) ends it, and
    so does Ctrl-C from a terminal under ``ros2 launch`` (two SIGINTs, the second during
    the teardown), with exit 0, no traceback and nothing after the deadline. (plag_driver,
    which needs a bus, has its SIGTERM test in test_driver_node; the impedance node's
    hand-back on a signal is in test_impedance_node.)"""
    params_file, params, ready = NODES[module]
    process = start_node(module, domain_id=35, log_dir=tmp_path,
                         params_file=REPO / 'config' / params_file, params=params)
    try:
        deadline = time.monotonic() + 120.0
        while ready not in process.output() and process.alive() \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ready in process.output(), process.output()[-3000:]
        time.sleep(1.0)                                   # spinning by now
        sent = time.monotonic()
        for signum in signals:
            process.process.send_signal(signum)
            time.sleep(0.01)
        code = process.process.wait(SHUTDOWN_DEADLINE_S + 60)
        took = time.monotonic() - sent
    finally:
        process.stop()
    output = process.output()
    print(f'\n{module} exited {code} {took:.2f} s after the signal; its last lines:\n'
          f'{process.tail(5)}')
    assert code == 0, output[-3000:]
    assert 'Traceback' not in output, output[-3000:]


# A node with a 100 Hz timer and a shutdown hook that spins the node for HOOK_S and says how
# many ticks it saw. Modes: 'clean'; 'crash' (the timer raises at its 5th tick: the hook
# must still run, then the error propagates); 'crashes' (it raises at every tick from the
# 5th: the hook's spin goes on); 'raise' (the hook raises: logged, the teardown goes on);
# 'hang' (the hook never returns: the deadline, grown by shutdown_s).
HOOK_SCRIPT = TICKER + """
from plag_ros.ros.controller_switch import spin_while

MODE, HOOK_S = sys.argv[1], 1.0

class Held(Ticker):
    def tick(self):
        super().tick()
        if self.ticks == 5 and MODE == 'crash' or self.ticks >= 5 and MODE == 'crashes':
            raise RuntimeError('a callback failed')

    def shutdown(self, executor):
        print('hook', flush=True)
        if MODE == 'hang':
            threading.Event().wait()   # never set
        if MODE == 'raise':
            raise OSError('the switch back failed')
        before = self.ticks
        spin_while(executor, lambda: True, time.monotonic() + HOOK_S)
        print('ticked' if self.ticks - before > 10 else f'{self.ticks - before} ticks',
              flush=True)

    def destroy_node(self):
        print('destroyed', flush=True)
        super().destroy_node()

spin_node(Held, shutdown=Held.shutdown, shutdown_s=lambda node: 1.0)
print('returned', flush=True)
"""


@pytest.mark.parametrize('mode, signals, lines, code', [
    ('clean', (signal.SIGTERM,), ['hook', 'ticked', 'destroyed', 'returned'], 0),
    # the second Ctrl-C lands in the hook: it is not cut short
    ('clean', (signal.SIGINT, signal.SIGINT), ['hook', 'ticked', 'destroyed', 'returned'], 0),
    ('crash', (), ['hook', 'ticked', 'destroyed'], 1),
    ('crashes', (), ['hook', 'ticked', 'destroyed'], 1),
    ('raise', (signal.SIGTERM,), ['hook', 'destroyed', 'returned'], 0),
    ('hang', (signal.SIGINT,), ['hook'], 1),
], ids=['SIGTERM', 'Ctrl-C twice', 'callback raises', 'callback keeps raising', 'hook raises',
        'hook hangs'])
def test_the_shutdown_hook_runs_with_the_node_spinning_however_the_spin_ended(
        mode, signals, lines, code):
    """spin_node's ``shutdown`` (the impedance node's hold and hand-back) runs once the spin
    ends on SIGTERM, on Ctrl-C twice (the second inside the hook) or on a callback's
    exception, before the node is destroyed and while its timers still fire (a callback
    that keeps raising is logged once and does not stop it). What it raises is logged and
    the teardown goes on; one that never returns ends with exit 1 and the stacks
    ``SHUTDOWN_DEADLINE_S + shutdown_s`` after the signal, not before."""
    proc = _start_script(HOOK_SCRIPT, mode)
    sent = time.monotonic()
    for count, signum in enumerate(signals):
        if count:          # the next one once the hook runs
            assert proc.stdout is not None and proc.stdout.readline().strip() == 'hook'
            lines = lines[1:]
        proc.send_signal(signum)
    try:
        out, err = proc.communicate(timeout=SHUTDOWN_DEADLINE_S + 60)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f'{mode}: the process did not end')
    took = time.monotonic() - sent
    print(f'\n{mode}: ended {took:.2f} s after the signal')
    assert proc.returncode == code, err
    assert out.split() == lines, (out, err)
    if mode.startswith('crash'):
        assert 'RuntimeError: a callback failed' in err, err
        # where it kept raising, the hook's spin logged it once and went on
        assert err.count('a callback failed during shutdown') == (mode == 'crashes'), err
    elif mode == 'raise':
        assert "shutdown failed: OSError('the switch back failed')" in err, err
    elif mode == 'hang':
        assert took > SHUTDOWN_DEADLINE_S + 1.0 - 0.5, f'{took:.1f} s'
        assert 'in shutdown' in err, err
    else:
        assert 'Traceback' not in err, err
