"""The CRANE-X7 driver's ros2_control side, real but for the servos: a test rig.

What runs, as on the robot PC after ``crane_x7_examples demo.launch.py``:

* the C++ ``robot_state_publisher`` with our URDF plus a ``<ros2_control>`` block shaped like
  rt-net/crane_x7_description's ``crane_x7.ros2_control.xacro`` (the 7 arm joints and finger
  a; a ``position`` command interface bounded by the joint limits; ``position``,
  ``velocity`` and ``effort`` states). It publishes ``/robot_description``, which the
  controller manager and our dynamics node read;
* the C++ ``ros2_control_node`` (controller_manager) with the driver's controllers
  (``test/data/crane_x7_driver_controllers.yaml``). Only the hardware plugin differs:
  ``mock_components/GenericSystem`` in place of ``crane_x7_hardware/CraneX7Hardware``;
* the real ``spawner`` activating ``joint_state_controller`` and ``crane_x7_arm_controller``.

The mock copies each position command into the position state exactly, at once: no
gravity sag, no servo spring, no P gain change on (de)activation, effort and velocity states
at zero. What plag_ros does with those (the spring model, the effort monitor) is tested
against the simulator instead (``test_crane_x7_driver.py``).

Where they come from: a ROS 2 install's prefixes on ``AMENT_PREFIX_PATH``
(``ros-<distro>-ros2-control``, ``-ros2-controllers``, ``-robot-state-publisher``; the
commands are in test/real_stack.py). None is on a package registry: CI skips these tests.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import yaml
from real_stack import ROS2_CONTROL_ENABLE, missing_or_fail
from ros_helpers import REPO, RosClient, domain, ros_env

__all__ = ['ARM', 'DRIVER_CONTROLLERS', 'ENABLE', 'MockCraneX7', 'executable', 'missing_tools',
           'mock_urdf', 'require_real_stack']

ARM = ['crane_x7_shoulder_fixed_part_pan_joint', 'crane_x7_shoulder_revolute_part_tilt_joint',
       'crane_x7_upper_arm_revolute_part_twist_joint',
       'crane_x7_upper_arm_revolute_part_rotate_joint', 'crane_x7_lower_arm_fixed_part_joint',
       'crane_x7_lower_arm_revolute_part_joint', 'crane_x7_wrist_joint']
HARDWARE_JOINTS = [*ARM, 'crane_x7_gripper_finger_a_joint']
DRIVER_CONTROLLERS = REPO / 'test' / 'data' / 'crane_x7_driver_controllers.yaml'
MANAGER = '/controller_manager'
START_TIMEOUT_S = 90.0
ENABLE = ROS2_CONTROL_ENABLE
"""How to get the real stack, for the skip and failure messages."""


def executable(package: str, name: str) -> Path | None:
    """``lib/<package>/<name>`` under a prefix of AMENT_PREFIX_PATH, else None."""
    prefixes = os.environ.get('AMENT_PREFIX_PATH', '').split(os.pathsep)
    for prefix in filter(None, prefixes):
        path = Path(prefix) / 'lib' / package / name
        if path.is_file() and os.access(path, os.X_OK):
            return path
    return None


def missing_tools() -> str:
    """What of the real stack is missing ('' when everything is there)."""
    missing = [f'{p}/{n}' for p, n in (('controller_manager', 'ros2_control_node'),
                                       ('controller_manager', 'spawner'),
                                       ('robot_state_publisher', 'robot_state_publisher'))
               if executable(p, n) is None]
    try:
        import controller_manager_msgs.srv  # noqa: F401
    except ImportError:
        missing.append('controller_manager_msgs (Python)')
    return ', '.join(missing)


def require_real_stack(need_launch: bool = True) -> None:
    """At a test module's top: skip it where the real stack (and, with ``need_launch``, launch
    and launch_ros) is missing; with ``PLAG_REQUIRE_ROS2_CONTROL=1`` fail instead."""
    missing = missing_tools()
    if need_launch:
        try:
            import launch  # noqa: F401, I001 - the ROS package, not launch/
            import launch_ros  # noqa: F401
        except ImportError:
            missing = ', '.join(filter(None, [missing, 'launch/launch_ros']))
    if not missing:
        return
    missing_or_fail(f'the real ros2_control stack is missing ({missing}): to run these '
                    f'tests, {ENABLE}', 'PLAG_REQUIRE_ROS2_CONTROL')


def mock_urdf(initial: dict[str, float] | None = None) -> str:
    """urdf/crane_x7.urdf with a ``<ros2_control>`` block on ``mock_components/GenericSystem``.

    Args:
        initial: position state at start per joint [rad] (default 0 for each).
    """
    text = (REPO / 'urdf' / 'crane_x7.urdf').read_text()
    limits = {j.get('name'): j.find('limit') for j in ET.fromstring(text).iter('joint')}
    block = ['<ros2_control name="crane_x7" type="system">',
             '  <hardware><plugin>mock_components/GenericSystem</plugin></hardware>']
    for name in HARDWARE_JOINTS:
        limit = limits[name]
        assert limit is not None, name
        block += [f'  <joint name="{name}">',
                  '    <command_interface name="position">',
                  f'      <param name="min">{limit.get("lower")}</param>',
                  f'      <param name="max">{limit.get("upper")}</param>',
                  '    </command_interface>',
                  '    <state_interface name="position">',
                  f'      <param name="initial_value">{(initial or {}).get(name, 0.0)}</param>',
                  '    </state_interface>',
                  '    <state_interface name="velocity"/>',
                  '    <state_interface name="effort"/>',
                  '  </joint>']
    block.append('</ros2_control>')
    end = text.rindex('</robot>')
    return text[:end] + '\n'.join(block) + '\n' + text[end:]


class MockCraneX7:
    """robot_state_publisher, the controller manager and the driver's two active controllers.

    Args:
        domain_id: the test's logical domain id (or a Domain).
        workdir: for the generated files, the logs and ``ROS_HOME`` (the spawner's lock).
        initial: the mock's start pose per joint [rad].
    """

    def __init__(self, domain_id: int, workdir: Path,
                 initial: dict[str, float] | None = None) -> None:
        self.domain_id, self.workdir = domain(domain_id), Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.env = ros_env(self.domain_id, {'ROS_HOME': str(self.workdir / 'ros_home')})
        urdf = mock_urdf(initial)
        self.rsp_params = self.workdir / 'robot_state_publisher.yaml'
        self.rsp_params.write_text(yaml.safe_dump(
            {'robot_state_publisher': {'ros__parameters': {'robot_description': urdf}}}))
        self.processes: dict[str, subprocess.Popen] = {}
        self._starts = 0

    def _run(self, label: str, argv: list[str]) -> subprocess.Popen:
        self._starts += 1
        log = open(self.workdir / f'{label}.{self._starts}.log', 'w')  # noqa: SIM115
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                   cwd=self.workdir, start_new_session=True)
        log.close()   # the child holds its own descriptor
        self.processes[label] = process
        return process

    def log(self, label: str) -> str:
        """The newest log of ``label`` ('robot_state_publisher', 'controller_manager')."""
        logs = sorted(self.workdir.glob(f'{label}.*.log'), key=lambda p: p.stat().st_mtime)
        return logs[-1].read_text(errors='replace') if logs else ''

    def start(self) -> None:
        """Everything, and the driver's controllers active (as after the robot's bring-up)."""
        rsp = executable('robot_state_publisher', 'robot_state_publisher')
        assert rsp is not None, missing_tools()
        self._run('robot_state_publisher', [str(rsp), '--ros-args', '--params-file',
                                            str(self.rsp_params)])
        self.start_manager()

    def start_manager(self) -> None:
        """The controller manager, then the spawner for the driver's controllers."""
        node = executable('controller_manager', 'ros2_control_node')
        assert node is not None, missing_tools()
        self._run('controller_manager', [str(node), '--ros-args', '--params-file',
                                         str(DRIVER_CONTROLLERS)])
        result = self.spawner('joint_state_controller', 'crane_x7_arm_controller')
        assert result.returncode == 0, (
            f'the driver controllers did not spawn:\n{result.stdout[-3000:]}\n'
            f'{self.log("controller_manager")[-3000:]}')

    def kill_manager(self) -> None:
        """The controller manager dies (SIGKILL: no cleanup, as a crashed driver)."""
        process = self.processes.pop('controller_manager')
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10.0)

    def spawner(self, *args: str, timeout: float = START_TIMEOUT_S
                ) -> subprocess.CompletedProcess:
        """The real spawner with ``args`` (``ros2 run controller_manager spawner ...``)."""
        spawner = executable('controller_manager', 'spawner')
        assert spawner is not None, missing_tools()
        return subprocess.run([str(spawner), *args, '-c', MANAGER,
                               '--controller-manager-timeout', str(int(START_TIMEOUT_S))],
                              capture_output=True, text=True, env=self.env, cwd=self.workdir,
                              timeout=timeout)

    @staticmethod
    def controllers(client: RosClient) -> dict[str, str]:
        """Controller name -> lifecycle state ('active', 'inactive', ...), from the real
        ``list_controllers`` service."""
        from controller_manager_msgs.srv import ListControllers

        # (a query: asked again when a restarted manager has not matched the client yet)
        response = client.call(ListControllers, f'{MANAGER}/list_controllers',
                               ListControllers.Request())
        return {c.name: c.state for c in response.controller}

    def close(self) -> None:
        """SIGINT to each process group, SIGKILL what is left after 10 s."""
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGINT)
        deadline = time.monotonic() + 10.0
        for process in self.processes.values():
            try:
                process.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(5.0)
        self.processes.clear()

    def __enter__(self) -> MockCraneX7:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()
