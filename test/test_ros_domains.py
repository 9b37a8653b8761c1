"""The tests' domain allocator (test/ros_domains.py): processes never share a physical id, a
dead process's ids come free, a logical id keeps its physical id within a process."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from ros_domains import POOL, Domain, DomainPool, domain, physical

from plag_ros.ros.domains import PRIVATE_DOMAINS

HERE = Path(__file__).resolve().parent

# A process holding the physical ids of the logical ids in argv[2:], from a pool of
# argv[1] ids (1..N) locked in $LOCKS: prints them (or 'exhausted' when none came free
# within half a second), then keeps them until its stdin closes.
HOLDER = """
import os, sys
from ros_domains import DomainPool
pool = DomainPool(os.environ['LOCKS'], range(1, int(sys.argv[1]) + 1))
try:
    ids = [pool.physical(int(a), wait_s=0.5) for a in sys.argv[2:]]
except RuntimeError:
    print('exhausted', flush=True)
else:
    print(' '.join(map(str, ids)), flush=True)
sys.stdin.read()
"""


class Holder:
    """A :data:`HOLDER` process; ``ids`` as it printed them."""

    def __init__(self, locks: Path, size: int, *logical: int) -> None:
        env = dict(os.environ, LOCKS=str(locks), PYTHONPATH=os.pathsep.join(
            [str(HERE.parent), str(HERE), os.environ.get('PYTHONPATH', '')]))
        self.process = subprocess.Popen(
            [sys.executable, '-c', HOLDER, str(size), *map(str, logical)], env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.process.stdout.readline().strip()
        self.exhausted = line == 'exhausted'
        self.ids = [] if self.exhausted else [int(x) for x in line.split()]

    def end(self, sig: int | None = None) -> None:
        if sig is None:
            self.process.stdin.close()
        else:
            self.process.send_signal(sig)
        self.process.wait(timeout=30)


def test_processes_never_share_an_id_and_a_dead_ones_ids_come_free(tmp_path):
    holders = []
    try:
        # three processes asking for the same logical ids share nothing: six ids of six
        holders = [Holder(tmp_path, 6, 1, 2) for _ in range(3)]
        taken = [i for h in holders for i in h.ids]
        assert sorted(taken) == [1, 2, 3, 4, 5, 6], taken
        assert holders[0].ids == [1, 2]          # the logical id itself when it is free
        # the pool is full: a fourth gets nothing
        fourth = Holder(tmp_path, 6, 1)
        fourth.end()
        assert fourth.exhausted
        # SIGKILL, no clean-up: the kernel drops its locks, and its ids are free again
        dead = holders.pop(1)
        dead.end(signal.SIGKILL)
        again = Holder(tmp_path, 6, 1, 2)
        holders.append(again)
        assert sorted(again.ids) == sorted(dead.ids), (again.ids, dead.ids)
    finally:
        for h in holders:
            if h.process.poll() is None:
                h.end()


def test_a_logical_id_keeps_its_physical_id_within_a_process(tmp_path):
    pool = DomainPool(tmp_path, range(1, 11))
    try:
        first = pool.physical(7)
        assert first == 7 and isinstance(first, Domain)
        assert pool.physical(7) is first
        other = pool.physical(3)
        assert other == 3 and other != first
        # threads asking at once for one new logical id all get the same one
        got: list[Domain] = []
        threads = [threading.Thread(target=lambda: got.append(pool.physical(9)))
                   for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(set(got)) == 1 and got[0] not in (first, other)
        assert pool.held() == {7: first, 3: other, 9: got[0]}
    finally:
        pool.release()
    # released: another pool (as another process would) takes 7 at once
    other_pool = DomainPool(tmp_path, range(1, 11))
    assert other_pool.physical(7) == 7
    other_pool.release()


def test_what_domain_maps_and_what_it_passes():
    """Logical ids are mapped (lazily: nothing at import); a Domain, 0 and the ids of
    plag-ros sim's private range are physical already."""
    mapped = domain(POOL.stop - 1)
    assert isinstance(mapped, Domain) and mapped in POOL
    assert domain(POOL.stop - 1) is mapped
    assert domain(mapped) is mapped                       # never mapped twice
    assert domain(0) == 0 and isinstance(domain(0), Domain)
    assert domain(PRIVATE_DOMAINS.start) == PRIVATE_DOMAINS.start
    assert domain(physical(42)) == 42
    assert str(physical(7)) == '7' and f'{physical(7)}' == '7'   # as argv and env get it
    assert not set(POOL) & set(PRIVATE_DOMAINS) and 0 not in POOL
    for bad in (-1, PRIVATE_DOMAINS.stop, 233, True, 1.0):
        with pytest.raises(ValueError):
            domain(bad)
