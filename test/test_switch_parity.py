"""The simulator's controller manager answers like the real one (logical domains 86, 87).

One sequence of real ``controller_manager_msgs`` service calls runs against two targets:

* ``controller_manager``: the real C++ controller manager of ros2_control with mock hardware
  and the driver's controllers (test/ros2_control_rig.py, domain 86), plus
  ``plag_arm_position_controller`` loaded inactive by the real spawner from
  config/crane_x7_controllers.yaml, as ``crane_x7.launch.py control:=true`` does;
* ``plag_sim``: ``python -m plag_ros.ros.nodes.sim_node`` (domain 87), whose
  ``controller_manager`` node emulates the two services
  (plag_ros/ros/emulated_controller_manager.py).

Both must give the same answers: the controller list (names, states, claimed interfaces),
a STRICT activation refused while the driver's controller holds the joints, the STRICT
switch to our controller and back accepted, and a STRICT switch naming an unknown controller
refused. Flags and states are compared exactly, message texts by their gist (the key phrase
and the names they quote), since only their meaning is part of the contract. Each target's
answers are also kept, and the second target to run is compared with the first.

Needs the real stack, from a ROS 2 install (test/real_stack.py has the commands). Without
it (CI) the module skips and says what is missing; with ``PLAG_REQUIRE_ROS2_CONTROL=1``
that is a failure instead. In every suite, test_emulated_controller_manager.py runs the same
sequence through the emulated rules against the answers recorded, per distribution, from
ros2_control's source (test/data/ros2_control_upstream.yaml).
"""
from __future__ import annotations

import re

import pytest
from ros2_control_rig import ARM, MockCraneX7, require_real_stack
from ros_helpers import REPO, RosClient, start_node
from sensor_msgs.msg import JointState

pytestmark = pytest.mark.ros2_control
require_real_stack(need_launch=False)

from controller_manager_msgs.srv import ListControllers, SwitchController  # noqa: E402

DOMAINS = {'controller_manager': 86, 'plag_sim': 87}
PARAM_FILE = REPO / 'config' / 'crane_x7_controllers.yaml'
MANAGER = '/controller_manager'
JTC = 'crane_x7_arm_controller'
FORWARD = 'plag_arm_position_controller'
BROADCASTER = 'joint_state_controller'
POSITIONS = [f'{joint}/position' for joint in ARM]
# Key phrases of the real manager's messages (ros2_control 5.16 controller_manager.cpp).
PHRASES = ('is currently claimed by another controller', 'Successfully switched controllers',
           'because no controller with this name exists', 'is already active',
           'can not be deactivated since it is not active',
           'no controllers need to be activated or deactivated')
TRANSCRIPTS: dict[str, list[tuple]] = {}
"""Per target, the answers of the sequence, for the comparison of the two targets."""


def gist(message: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The meaning of a message: the key phrases it contains and the names it quotes."""
    return (tuple(p for p in PHRASES if p in message),
            tuple(re.findall(r"'([^']*)'", message)))


@pytest.fixture(params=list(DOMAINS))
def target(request, tmp_path):
    """(name, client, sim process or None) with the target's controller manager up:
    crane_x7_arm_controller active, plag_arm_position_controller loaded inactive."""
    name, domain = request.param, DOMAINS[request.param]
    robot = process = None
    client = RosClient(domain, 'plag_test_switch_parity')
    try:
        if name == 'controller_manager':
            robot = MockCraneX7(domain, tmp_path / 'rig')
            robot.start()
            spawned = robot.spawner(FORWARD, '--inactive', '--param-file', str(PARAM_FILE))
            assert spawned.returncode == 0, (
                f'the spawner did not load {FORWARD}:\n{spawned.stdout[-3000:]}\n'
                f'{spawned.stderr[-3000:]}\n{robot.log("controller_manager")[-3000:]}')
        else:
            process = start_node('sim_node', domain_id=domain, log_dir=tmp_path,
                                 params_file=REPO / 'config' / 'sim.yaml')
            states = client.collect(JointState, 'joint_states')
            client.wait_for(lambda: states or not process.alive(), 60.0,
                            'joint_states from plag_sim')
            assert process.alive(), process.output()[-3000:]
        yield name, client, process
    finally:
        client.close()
        if robot is not None:
            robot.close()
        if process is not None:
            code = process.stop()
            assert code == 0, f'sim_node exited with {code}:\n{process.output()[-3000:]}'


def test_switch_controller_answers_like_the_real_controller_manager(target):
    name, client, process = target
    transcript: list[tuple] = []

    def controllers() -> dict[str, tuple[str, list[str]]]:
        """Controller -> (state, claimed interfaces), from list_controllers."""
        response = client.call(ListControllers, f'{MANAGER}/list_controllers',
                               ListControllers.Request())
        listed = {c.name: (c.state, list(c.claimed_interfaces)) for c in response.controller}
        required = {c.name: list(c.required_command_interfaces) for c in response.controller
                    if hasattr(c, 'required_command_interfaces')}
        transcript.append(('list', sorted(listed.items()), sorted(required.items())))
        return listed

    def switch(activate: list[str], deactivate: list[str],
               strictness: int = SwitchController.Request.STRICT) -> tuple[bool, str]:
        """A switch, STRICT unless told; (ok, message)."""
        request = SwitchController.Request(activate_controllers=activate,
                                           deactivate_controllers=deactivate,
                                           strictness=strictness, activate_asap=True)
        request.timeout.sec = 5
        # (sent once, after the manager has matched the client: a switch must not go twice)
        response = client.call(SwitchController, f'{MANAGER}/switch_controller', request,
                               once=True)
        transcript.append(('switch', activate, deactivate, strictness, response.ok,
                           gist(response.message)))
        return response.ok, response.message

    def expect_arm(active: str, inactive: str) -> None:
        listed = controllers()
        assert set(listed) == {JTC, FORWARD, BROADCASTER}, listed
        assert listed[active] == ('active', POSITIONS), listed
        assert listed[inactive] == ('inactive', []), listed
        assert listed[BROADCASTER] == ('active', []), listed

    # After the bring-up: the driver's JTC holds the 7 position interfaces.
    expect_arm(JTC, FORWARD)
    required = transcript[-1][2]
    if required:   # the message has required_command_interfaces (Humble and later)
        assert dict(required)[FORWARD] == POSITIONS and dict(required)[JTC] == POSITIONS

    # Our controller cannot start while the JTC still claims the joints.
    ok, message = switch([FORWARD], [])
    assert not ok
    assert 'is currently claimed by another controller' in message, message
    assert f"'{POSITIONS[0]}'" in message and FORWARD in message, message
    expect_arm(JTC, FORWARD)

    # Deactivating the JTC in the same request frees them.
    ok, message = switch([FORWARD], [JTC])
    assert ok, message
    assert 'Successfully switched controllers' in message, message
    expect_arm(FORWARD, JTC)
    if process is not None:   # the simulator switched, with the parameter path's log line
        client.wait_for(lambda: f'switch: {JTC} -> {FORWARD}' in process.output(), 60.0,
                        'the switch in the simulator log')

    # And back.
    ok, message = switch([JTC], [FORWARD])
    assert ok, message
    assert 'Successfully switched controllers' in message, message
    expect_arm(JTC, FORWARD)

    # An unknown name refuses the whole STRICT request: nothing changes.
    ok, message = switch([FORWARD], [JTC, 'no_such_controller'])
    assert not ok
    assert "'no_such_controller'" in message, message
    assert 'no controller with this name exists' in message, message
    expect_arm(JTC, FORWARD)

    # BEST_EFFORT does not override the claims: still refused while the JTC holds them.
    best_effort = SwitchController.Request.BEST_EFFORT
    ok, message = switch([FORWARD], [], best_effort)
    assert not ok and 'is currently claimed by another controller' in message, message
    # An active controller: STRICT refuses to activate it again, BEST_EFFORT skips it.
    ok, message = switch([JTC], [])
    assert not ok and 'is already active' in message, message
    ok, message = switch([JTC], [], best_effort)
    assert ok and 'no controllers need to be activated or deactivated' in message, message
    expect_arm(JTC, FORWARD)

    TRANSCRIPTS[name] = transcript
    other = next((t for t in TRANSCRIPTS if t != name), None)
    if other is not None:
        assert transcript == TRANSCRIPTS[other], f'{name} and {other} answered differently'
