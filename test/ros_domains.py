"""ROS domains for tests: a logical id names a physical domain no other process here holds.

A test module names its domain by a small fixed number (``DOMAIN_ID = 12``): a *logical*
id. Two processes may run that module at once (two CI suites on one machine, pytest-xdist
workers), and two modules may pick the same number; over DDS they would then see each
other's nodes. :func:`domain` maps the logical id to a *physical* ROS_DOMAIN_ID that this
process holds alone on the machine:

* the pool is :data:`POOL` (1..100): not 0 (a robot PC's default graph) and not
  :data:`plag_ros.ros.domains.PRIVATE_DOMAINS` (101..199, where ``plag-ros sim`` puts itself);
* each physical id has a lock file in :data:`LOCK_DIR` (one folder for the machine, whatever
  ``TMPDIR`` a suite sets), taken with ``fcntl.flock``: the kernel releases it when the
  process ends, however it ends, so a killed run leaves nothing to clean up;
* an id is taken at the first :func:`domain` call for it, in a test or fixture, never at
  import (pytest-xdist workers import every module), and kept for the life of the
  process: the same logical id gives the same physical id in one process. The logical id
  itself is tried first, so an unloaded machine runs each module in its own number; when it
  is held, the highest free id is taken, away from the small ids that tests and people
  name by hand.

The result is a :class:`Domain` (an ``int``): the helpers (``ros_env``, ``start_node``,
``RosClient``, ``launch_runs``, ``ros2_control_rig``) take logical ids and Domains alike and
map a Domain never again. 0 and the ids of ``PRIVATE_DOMAINS`` are domains the test did not
choose (the default graph; the one ``plag-ros sim`` picked and printed): they pass unmapped,
as does any id wrapped in :func:`physical`.

What the lock cannot see: a graph started by hand in a pool id (``export ROS_DOMAIN_ID=12``),
and a node process that outlives the test process holding its id (the helpers stop their
nodes in ``finally``).
"""
from __future__ import annotations

import errno
import fcntl
import os
import threading
import time
from pathlib import Path

from plag_ros.ros.domains import PRIVATE_DOMAINS

__all__ = ['LOCK_DIR', 'POOL', 'Domain', 'DomainPool', 'domain', 'physical']

POOL = range(1, 101)
"""Physical ids the tests take (Fast DDS ports of domain 100 end below 32768, where the
kernel's ephemeral ports begin)."""
LOCK_DIR = Path(os.environ.get('PLAG_TEST_DOMAIN_LOCKS', '/tmp/plag_ros_test_domains'))
"""One lock file per physical id; ``PLAG_TEST_DOMAIN_LOCKS`` moves it (the allocator's own
test uses a folder of its own)."""
WAIT_S = 120.0
"""How long :meth:`DomainPool.physical` waits for an id when every one is held."""


class Domain(int):
    """A physical ROS_DOMAIN_ID: what reaches DDS, never mapped again."""

    def __repr__(self) -> str:
        return f'Domain({int(self)})'

    def __str__(self) -> str:           # what an environment variable or argv gets
        return int.__repr__(self)


def physical(domain_id: int) -> Domain:
    """``domain_id`` as it is: a domain the test did not choose (one a process printed)."""
    return Domain(domain_id)


class DomainPool:
    """Logical id -> physical id, each physical id held through a ``flock`` on its file.

    Args:
        lock_dir: folder of the lock files, shared by every process of the machine.
        ids: the physical ids to hand out.
    """

    def __init__(self, lock_dir: Path, ids: range | list[int] = POOL) -> None:
        self.lock_dir, self.ids = Path(lock_dir), list(ids)
        self._lock = threading.Lock()
        self._by_logical: dict[int, Domain] = {}
        self._fds: dict[int, int] = {}          # physical id -> descriptor holding its lock

    def physical(self, logical: int, wait_s: float = WAIT_S) -> Domain:
        """The physical id of ``logical`` in this process, taken now if it has none.

        Raises:
            RuntimeError: every id of the pool stayed held by other processes for
                ``wait_s``.
        """
        with self._lock:
            if logical in self._by_logical:
                return self._by_logical[logical]
            deadline = time.monotonic() + wait_s
            while True:
                taken = self._take(logical)
                if taken is not None:
                    self._by_logical[logical] = taken
                    return taken
                if time.monotonic() >= deadline:
                    raise RuntimeError(
                        f'no free ROS domain among {self.ids[0]}..{self.ids[-1]} for '
                        f'{wait_s:g} s (lock files in {self.lock_dir}; this process holds '
                        f'{sorted(self._fds)})')
                time.sleep(0.2)

    def held(self) -> dict[int, Domain]:
        """Logical -> physical ids this process holds."""
        with self._lock:
            return dict(self._by_logical)

    def release(self) -> None:
        """Give back every id (the process's end does the same)."""
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()
            self._by_logical.clear()

    def _take(self, logical: int) -> Domain | None:
        """Lock the first free id: ``logical`` itself if in the pool, then the others from
        the highest down."""
        order = sorted(self.ids, reverse=True)
        if logical in self.ids:
            order.remove(logical)
            order.insert(0, logical)
        self.lock_dir.mkdir(parents=True, exist_ok=True)
        try:   # every user of the machine takes ids here (sticky, like /tmp)
            os.chmod(self.lock_dir, 0o1777)
        except PermissionError:
            pass
        for candidate in order:
            if candidate in self._fds:
                continue
            fd = self._open(self.lock_dir / f'domain_{candidate:03d}.lock')
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                os.close(fd)
                if err.errno in (errno.EWOULDBLOCK, errno.EACCES):
                    continue
                raise
            self._note_holder(fd, logical)
            self._fds[candidate] = fd
            return Domain(candidate)
        return None

    @staticmethod
    def _open(path: Path) -> int:
        """The lock file, created readable and writable by all; read-only where another
        user created it (a read-only descriptor locks as well)."""
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except PermissionError:
            return os.open(path, os.O_RDONLY)
        try:
            os.fchmod(fd, 0o666)
        except PermissionError:
            pass
        return fd

    @staticmethod
    def _note_holder(fd: int, logical: int) -> None:
        """Who holds the id, for a person looking at the folder (the lock is the truth)."""
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f'pid {os.getpid()} logical {logical}\n'.encode(), 0)
        except OSError:
            pass                     # opened read-only: the lock alone


_POOL = DomainPool(LOCK_DIR)


def domain(domain_id: int) -> Domain:
    """The physical ROS_DOMAIN_ID for ``domain_id``.

    A :class:`Domain`, 0 and an id of ``PRIVATE_DOMAINS`` are physical already and come
    back as they are; 1..100 is a logical id, mapped by this process's pool.

    Raises:
        ValueError: any other id.
    """
    if isinstance(domain_id, Domain):
        return domain_id
    if isinstance(domain_id, bool) or not isinstance(domain_id, int):
        raise ValueError(f'a ROS domain id is an int, got {domain_id!r}')
    if domain_id == 0 or domain_id in PRIVATE_DOMAINS:
        return Domain(domain_id)
    if domain_id not in POOL:
        raise ValueError(f'logical ROS domain ids are {POOL.start}..{POOL.stop - 1} (0 and '
                         f'{PRIVATE_DOMAINS.start}..{PRIVATE_DOMAINS.stop - 1} pass as they '
                         f'are), got {domain_id}')
    return _POOL.physical(domain_id)
