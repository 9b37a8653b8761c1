"""plag_ros as a lab installs it, beside the test venv and apart from this checkout.

``make lab-venv`` (a prerequisite of ``make test``) builds two virtualenvs:

* the lab's (``PLAG_LAB_VENV``): ``pip install '.[driver]'`` with the ROS wheels standing
  in for a ROS install, and nothing else: no test tool, no Pinocchio, this checkout not on
  the path. Torque mode must run from it: ``plag-ros run --driver`` against ``plag-ros sim
  --dynamixel`` takes the emulated arm into current mode and back.
* colcon's (``PLAG_COLCON_VENV``): colcon and ament from the package registries
  (requirements/colcon.txt). ``colcon build --packages-select plag_ros`` in a workspace
  holding a copy of this checkout must install the package as ``ros2 run`` and ``ros2
  launch`` look for it: the ament index marker, package.xml, the launch, config and URDF
  files under share/plag_ros, the node executables under lib/plag_ros; and after ``source
  install/setup.bash`` the installed copy is the one Python imports and the one
  ament_index_python finds.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from ros_helpers import LATCHED, RosClient, ros_env
from std_msgs.msg import String
from test_driver_node import bend, enable, last, ready
from torque_rig import JOINTS, ROOT

pytestmark = pytest.mark.long
DOMAIN_ID = 37
PACKAGE = 'plag_ros'
EXECUTABLES = ('plag-ros', 'dynamics_node', 'sim_node', 'impedance_node', 'driver_node')
"""setup.py's console scripts: where ``ros2 run plag_ros NAME`` looks (lib/plag_ros)."""
LOADED = {'plag_driver': {'stale_s': 2.0, 'watchdog_s': 2.5, 'failed_reads': 100},
          'plag_impedance': {'stale_periods': 100.0, 'filter.gap_periods': 100.0}}
"""The watchdogs far above a stall of a loaded 2-core machine (test_driver_node.LOADED):
the install is under test here, the watchdogs are in test_bus_driver.py."""


VENVS = {'PLAG_LAB_VENV': '.venv-lab', 'PLAG_COLCON_VENV': '.venv-colcon'}
"""Where ``make lab-venv`` puts each virtualenv (the Makefile exports the variables)."""


def venv(variable: str) -> Path:
    """The virtualenv ``make lab-venv`` built, named by ``variable``; a clear failure
    where there is none (never a skip: ``make test`` builds it first)."""
    path = Path(os.environ.get(variable) or ROOT / VENVS[variable])
    if not (path / 'bin' / 'python').exists():
        pytest.fail(f'no virtualenv at {path} ({variable}): `make lab-venv` builds it',
                    pytrace=False)
    return path


def lab_env(domain_id: int, lab: Path) -> dict[str, str]:
    """A node environment of ``domain_id`` with the lab's interpreter first on PATH and
    nothing of this checkout on PYTHONPATH."""
    env = ros_env(domain_id)
    env.pop('PYTHONPATH', None)
    env['PATH'] = os.pathsep.join([str(lab / 'bin'), env['PATH']])
    return env


def run(args: list[str], **kwargs) -> str:
    """``args`` run to the end (exit 0 asserted); their output."""
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, **kwargs)
    assert done.returncode == 0, f'{args}: {done.stdout}\n{done.stderr}'
    return done.stdout


def test_the_lab_install_has_the_declared_dependencies_only():
    """The lab's venv imports plag_ros from its own site-packages, not from this checkout,
    and holds none of the test tools (requirements/test-tools.txt, Pinocchio)."""
    lab = venv('PLAG_LAB_VENV')
    where = run([str(lab / 'bin' / 'python'), '-c',
                 'import plag_ros, sys; print(plag_ros.__file__)'],
                cwd='/', env=lab_env(DOMAIN_ID, lab))
    # (make lab-venv puts the lab's venv inside this checkout: .venv-lab)
    imported = Path(where.strip())
    assert imported.is_relative_to(lab), where
    assert not imported.is_relative_to(ROOT / 'plag_ros'), where
    listed = run([str(lab / 'bin' / 'python'), '-m', 'pip', 'list', '--format=freeze'])
    installed = {line.split('==')[0].lower().replace('_', '-') for line in listed.split()}
    assert not installed & {'pytest', 'ruff', 'mypy', 'pin', 'pytest-xdist'}, installed
    assert {'dynamixel-sdk', 'ros-rclpy', 'numba', 'rosbags'} <= installed, installed


def test_plag_ros_run_driver_from_the_lab_install_takes_the_emulated_arm_into_current_mode(
        tmp_path):
    """``plag-ros sim --dynamixel`` and ``plag-ros run --driver LINK --control`` from the
    lab's venv (two graphs: they meet on the bus only): with the arm bent off its limits,
    ``~/enable`` puts the arm joints in current mode and ``~/enable false`` back in
    position mode; both commands stop on Ctrl-C with exit code 0."""
    lab = venv('PLAG_LAB_VENV')
    link, params = tmp_path / 'dxl', tmp_path / 'loaded.yaml'
    params.write_text(yaml.safe_dump({f'/**/{node}': {'ros__parameters': values}
                                      for node, values in LOADED.items()}))
    processes: list[subprocess.Popen] = []

    def start(args: list[str], domain_id: int, log: str) -> subprocess.Popen:
        with open(tmp_path / log, 'w') as out:
            # a session of its own: a failed test ends the command's nodes too, not only
            # the command (orphaned nodes would publish into the next run's graph)
            process = subprocess.Popen([str(lab / 'bin' / 'plag-ros'), *args], cwd=tmp_path,
                                       env=lab_env(domain_id, lab), stdout=out,
                                       stderr=subprocess.STDOUT, text=True,
                                       start_new_session=True)
        processes.append(process)
        return process

    def log(name: str) -> str:
        return (tmp_path / name).read_text()

    try:
        start(['sim', '--dynamixel', '--dynamixel-link', str(link),
               '--log-dir', str(tmp_path / 'sim-logs')], DOMAIN_ID + 1, 'sim.out')
        deadline = time.monotonic() + 240     # the bus starts once the nodes have
        while not link.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert link.exists(), log('sim.out')
        with RosClient(DOMAIN_ID, 'plag_test_lab') as client:
            reports = client.collect(String, '/plag_driver/state', LATCHED)
            states = client.collect(String, '/plag_impedance/state', LATCHED)
            start(['run', '--driver', str(link), '--control', '--params-file', str(params),
                   '--log-dir', str(tmp_path / 'run-logs')], DOMAIN_ID, 'run.out')
            client.wait_for(lambda: reports, 120.0, 'the driver of the lab install')
            bend(client)
            ready(client, states, 'the impedance node of the lab install')
            response = enable(client, True)
            assert response.success, response.message
            client.wait_for(lambda: last(reports)['modes'][JOINTS[3]] == 'current', 60.0,
                            'current mode')
            client.wait_for(lambda: last(states)['state'] == 'enabled', 60.0, 'the ramp')
            assert enable(client, False).success
            client.wait_for(lambda: last(reports)['modes'][JOINTS[3]] == 'position', 60.0,
                            'position mode again')
        for process, name in zip(reversed(processes), ('run.out', 'sim.out')):
            process.send_signal(signal.SIGINT)
            assert process.wait(timeout=60) == 0, log(name)
    finally:
        for process in processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def workspace_copy(workspace: Path) -> Path:
    """The files git tracks in this checkout, copied to ``workspace``/src/plag_ros (a lab
    clones the repository there)."""
    source = workspace / 'src' / PACKAGE
    tracked = run(['git', 'ls-files', '-z'], cwd=ROOT).split('\0')
    for name in filter(None, tracked):
        target = source / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)
    return source


def test_colcon_build_installs_what_ros2_run_and_ros2_launch_look_for(tmp_path):
    """The docs' two commands (docs/howto/install-ros2.md) with colcon and ament from the
    registries; every launch, config and URDF file git tracks and package.xml are under
    share/plag_ros as they are here; the ament index marker and the executables are where
    ros2 finds them; sourced, Python imports the installed plag_ros (run by the lab's
    interpreter) and ament_index_python finds its share folder."""
    colcon, lab = venv('PLAG_COLCON_VENV'), venv('PLAG_LAB_VENV')
    source = workspace_copy(tmp_path)
    env = dict(os.environ, PATH=os.pathsep.join([str(colcon / 'bin'), os.environ['PATH']]))
    env.pop('PYTHONPATH', None)
    run(['colcon', 'build', '--packages-select', PACKAGE], cwd=tmp_path, env=env)
    prefix = tmp_path / 'install' / PACKAGE
    share = prefix / 'share' / PACKAGE
    shipped = ['package.xml'] + [
        name for name in run(['git', 'ls-files', 'launch', 'config', 'urdf'], cwd=ROOT).split()]
    for name in shipped:
        assert (share / name).read_bytes() == (source / name).read_bytes(), name
    assert (prefix / 'share' / 'ament_index' / 'resource_index' / 'packages' / PACKAGE
            ).is_file()
    for name in EXECUTABLES:
        script = prefix / 'lib' / PACKAGE / name
        assert os.access(script, os.X_OK), script
        assert script.read_text().splitlines()[0] == '#!/usr/bin/env python3', script
    sourced = lab_env(DOMAIN_ID, lab)
    sourced['PATH'] = os.pathsep.join([str(lab / 'bin'), str(colcon / 'bin'),
                                       os.environ['PATH']])
    found = run(['bash', '-c', 'source install/setup.bash && python3 -c "import plag_ros; '
                 'print(plag_ros.__file__)" && install/plag_ros/lib/plag_ros/plag-ros --help '
                 f'> /dev/null && {colcon}/bin/python -c "from ament_index_python.packages '
                 "import get_package_share_directory as share; print(share('plag_ros'))\""],
                cwd=tmp_path, env=sourced).split()
    assert found[0].startswith(str(prefix / 'lib')), found
    assert Path(found[1]) == share, found
