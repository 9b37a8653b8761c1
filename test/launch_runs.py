"""Running a launch file as ``ros2 launch`` does, for the tests under the real launch_ros.

:class:`LaunchRun` starts ``launch.LaunchService`` on a launch file in a child process of its
own session (so a Ctrl-C can go to the whole group, as from a terminal), with the test's ROS
domain, and reads what launch logged. Used by test_launch_live.py and
test_ros2_control_live.py; importing it needs nothing of launch itself.
"""
from __future__ import annotations

import filecmp
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ros_helpers import REPO, ros_env

__all__ = ['START_TIMEOUT_S', 'LaunchRun', 'child_env', 'installed_share']

START_TIMEOUT_S = 120.0            # cold start on a loaded 2-core machine

# `ros2 launch FILE ARGS`, in Python (ros2launch does the same with more options).
RUNNER = """
import sys
import launch
from launch.actions import IncludeLaunchDescription
from launch.launch_description_sources import PythonLaunchDescriptionSource
arguments = [tuple(a.split(':=', 1)) for a in sys.argv[2:]]
service = launch.LaunchService(argv=sys.argv[2:], noninteractive=True)
service.include_launch_description(launch.LaunchDescription([IncludeLaunchDescription(
    PythonLaunchDescriptionSource(sys.argv[1]), launch_arguments=arguments)]))
sys.exit(service.run())
"""


def child_env(domain_id: int, extra: dict[str, str] | None = None) -> dict[str, str]:
    """ros_env without this checkout on PYTHONPATH: the nodes run the installed package
    (``domain_id``: the test's logical id, or a Domain; ros_env maps it)."""
    env = ros_env(domain_id, extra)
    env['PYTHONPATH'] = os.pathsep.join(
        p for p in env['PYTHONPATH'].split(os.pathsep)
        if p and Path(p).resolve() != REPO.resolve())
    return env


def _alive(pid: int) -> bool:
    try:
        state = Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != 'Z'


class LaunchRun:
    """One ``ros2 launch``-like run of ``path`` with ``args`` in a session of its own."""

    def __init__(self, path: Path, args: list[str], domain_id: int, log: Path,
                 env: dict[str, str] | None = None) -> None:
        self.path, self.log = path, log
        self._file = open(log, 'w')  # noqa: SIM115 - closed in wait()
        self.process = subprocess.Popen(
            [sys.executable, '-c', RUNNER, str(path), *args], stdout=self._file,
            stderr=subprocess.STDOUT, env=env or child_env(domain_id), cwd=log.parent,
            start_new_session=True)
        self.rc: int | None = None

    def output(self) -> str:
        return self.log.read_text(errors='replace')

    def started(self) -> dict[str, int]:
        """Process label -> pid of every process launch started."""
        return {name: int(pid) for name, pid in re.findall(
            r'^\[INFO\] \[(\S+)\]: process started with pid \[(\d+)\]', self.output(), re.M)}

    def wait_for_output(self, pattern: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if re.search(pattern, self.output(), re.M):
                return
            assert self.process.poll() is None, (
                f'launch ended ({self.process.returncode}) before {pattern!r}:\n'
                f'{self.output()[-4000:]}')
            time.sleep(0.05)
        raise AssertionError(f'no {pattern!r} within {timeout} s:\n{self.output()[-4000:]}')

    def wait(self, timeout: float) -> int:
        try:
            self.rc = self.process.wait(timeout)
        finally:
            self._file.close()
        return self.rc

    def ctrl_c(self, timeout: float = 60.0) -> int:
        """SIGINT to the process group (a terminal's Ctrl-C) and wait for launch to end."""
        os.killpg(self.process.pid, signal.SIGINT)
        return self.wait(timeout)

    def kill(self) -> None:
        """Last resort in a finally: nothing of this run may outlive the test."""
        if self.process.poll() is None or self._group_alive():
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait(10.0)
        self._file.close()

    def _group_alive(self) -> bool:
        try:
            os.killpg(self.process.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def assert_clean_exit(self) -> None:
        """Exit 0, every process finished cleanly, no traceback/ERROR, nothing left."""
        out = self.output()
        started = self.started()
        assert started, f'launch started nothing:\n{out[-4000:]}'
        assert self.rc == 0, f'launch exit code {self.rc}:\n{out[-4000:]}'
        for bad in ('Traceback', '[ERROR]', 'ERROR', 'RCLError', 'Failed to publish',
                    'process has died', 'KeyboardInterrupt'):
            assert bad not in out, f'{bad!r} in the launch output:\n{out[-6000:]}'
        finished = {name: int(pid) for name, pid in re.findall(
            r'^\[INFO\] \[(\S+)\]: process has finished cleanly \[pid (\d+)\]', out, re.M)}
        assert finished == started, f'started {started}, finished cleanly {finished}'
        left = [pid for pid in (self.process.pid, *started.values()) if _alive(pid)]
        deadline = time.monotonic() + 30.0     # the kernel reaps asynchronously
        while (left or self._group_alive()) and time.monotonic() < deadline:
            time.sleep(0.05)
            left = [pid for pid in left if _alive(pid)]
        assert not left and not self._group_alive(), f'still running after launch: {left}'

    def end_cleanly(self) -> None:
        """The usual end of a test's launch: no launch warnings, then Ctrl-C, exit code 0,
        every process finished cleanly and nothing left running."""
        self.assert_no_launch_warnings()
        assert self.ctrl_c() == 0
        self.assert_clean_exit()

    def assert_no_launch_warnings(self) -> None:
        """launch's own WARNING/ERROR lines (a missing parameter file is only a WARNING)."""
        lines = re.findall(r'^\[(?:WARNING|ERROR)\].*$', self.output(), re.M)
        assert not lines, f'launch warned: {lines}'


def installed_share(enable: str) -> Path:
    """The colcon install's share/plag_ros, which must hold this checkout's files (``enable``
    says how to get it)."""
    from ament_index_python.packages import PackageNotFoundError, get_package_share_directory

    try:
        path = Path(get_package_share_directory('plag_ros'))
    except PackageNotFoundError:
        pytest.fail(f'launch_ros is importable but plag_ros is not in the ament index: {enable}')
    for sub, pattern in (('launch', '*.launch.py'), ('config', '*.yaml')):
        for mine in (REPO / sub).glob(pattern):
            installed = path / sub / mine.name
            assert installed.is_file() and filecmp.cmp(mine, installed, shallow=False), (
                f'{installed} is missing or differs from {mine}: the colcon install is stale; '
                f'run `colcon build --packages-select plag_ros` again')
    return path
