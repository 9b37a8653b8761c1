"""What each bring-up runs: the plag_ros nodes of the simulator, robot and replay setups.

The one description of these nodes, read by ``launch/sim.launch.py``,
``launch/crane_x7.launch.py`` and ``launch/replay.launch.py`` (which turn each
:class:`NodeSetup` into a launch_ros ``Node``) and by ``plag-ros sim`` / ``plag-ros run``
(:mod:`plag_ros.apps.bringup`, which turns each into a node subprocess). Per node: the
executable (a console script of setup.py running ``plag_ros.ros.nodes.<executable>``), the
node name, the parameter file under ``config/``, the parameters set on top of that file
(each with the reason it is there) and the remappings. A node marked ``control_only`` runs
only when the partial-impedance controller is asked for (``control:=true``, ``plag-ros
sim --control``).

What only the launch files start (robot_state_publisher, rviz2, controller_manager's
spawner) is written in the launch files. Nothing here imports launch or launch_ros.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ['PACKAGE', 'NodeSetup', 'replay_setup', 'robot_setup', 'running',
           'sim_setup']

PACKAGE = 'plag_ros'


@dataclass(frozen=True)
class NodeSetup:
    """One plag_ros node of a setup.

    ``overrides`` values are plain YAML values (str, float, bool, lists of them); in a
    launch file a value may also be a launch substitution (a launch argument's value).
    """

    executable: str
    name: str
    params_file: str
    overrides: Mapping[str, object] = field(default_factory=dict)
    remappings: Sequence[tuple[str, str]] = ()
    control_only: bool = False

    def runs(self, control: bool) -> bool:
        """Whether this node is started when the controller is (not) asked for."""
        return control or not self.control_only


def _dynamics(description_source: object, **overrides: object) -> NodeSetup:
    return NodeSetup('dynamics_node', 'plag_dynamics', 'crane_x7.yaml',
                     {'robot_description_source': description_source, **overrides})


def sim_setup() -> list[NodeSetup]:
    """The simulated CRANE-X7: simulator, dynamics node, controller with ``control``."""
    return [
        NodeSetup('sim_node', 'plag_sim', 'sim.yaml'),
        # The model is the simulator's, always: wait for its robot_description however long
        # a cold start takes (0 = no timeout), never fall back to the bundled URDF, which
        # would silently differ from the simulated robot when sim.yaml names another
        # urdf_path.
        _dynamics('topic', robot_description_timeout=0.0),
        # The simulator emulates the driver's controller manager: switch through it.
        NodeSetup('impedance_node', 'plag_impedance', 'impedance.yaml',
                  {'switch.method': 'sim'}, control_only=True),
    ]


def robot_setup(description_source: object = 'topic', controller_file: object = ''
                ) -> list[NodeSetup]:
    """The real CRANE-X7: dynamics node (model from ``description_source``: 'topic', the
    robot's robot_description, or 'file', the bundled URDF), controller with ``control``.

    The controller keeps its file's ``switch.method``: the robot's controller_manager.
    ``controller_file``, where given, is the ros2_control parameter file our controller was
    spawned with: the controller checks the loaded controller against it.
    """
    impedance = {'command.controller_file': controller_file} if controller_file else {}
    return [
        _dynamics(description_source),
        NodeSetup('impedance_node', 'plag_impedance', 'impedance.yaml', impedance,
                  control_only=True),
    ]


def replay_setup(description_source: object = 'file') -> list[NodeSetup]:
    """A recorded bag played with ``/clock``: dynamics node, controller with ``control``,
    both on the bag's time. The model comes from the bundled URDF by default: a bag of
    ``/joint_states`` rarely holds the robot's ``robot_description``. The controller's
    commands reach no robot: it runs to study what it would have sent."""
    return [
        _dynamics(description_source, use_sim_time=True),
        NodeSetup('impedance_node', 'plag_impedance', 'impedance.yaml',
                  {'use_sim_time': True}, control_only=True),
    ]


def running(setups: Sequence[NodeSetup], control: bool) -> list[NodeSetup]:
    """The nodes of ``setups`` started with the controller on (``control``) or off."""
    return [setup for setup in setups if setup.runs(control)]
