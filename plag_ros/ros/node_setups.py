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

Each launch file's arguments (name, default, the values it accepts, what it does) are
described here too (:class:`LaunchArgument`, :func:`sim_arguments`, :func:`robot_arguments`,
:func:`replay_arguments`), and so are the launch files' decisions that depend on the
machine or the graph (:func:`replay_tf`, :func:`replay_player`, :func:`view_inputs_line`):
CI, which has no launch_ros, checks them here, and the launch files only turn them into
actions (plag_ros/ros/launch_actions.py).

What only the launch files start (robot_state_publisher, rviz2, controller_manager's
spawner) is written in the launch files or, where several start the same,
in plag_ros/ros/launch_actions.py. Nothing here imports launch or launch_ros.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

from plag_ros.ros.controller_file import CONTROLLER, node_section, section_reaches

__all__ = ['CLOCK', 'DESCRIPTION_SOURCES', 'DRIVER_FIXED', 'NAMESPACED_NAMES', 'NO_TF',
           'PACKAGE', 'PLAYERS', 'TF_MODES', 'TORQUE_MODE_FIXED', 'VIEW_INPUTS', 'LaunchArgument',
           'NodeSetup', 'ReplayTf',
           'check_params_file', 'is_true', 'namespace_of', 'node_section', 'own_params_file',
           'namespaced_topic', 'parameter_layers', 'replay_arguments', 'replay_remaps',
           'replay_player', 'replay_setup', 'replay_tf', 'robot_arguments', 'robot_setup',
           'running', 'sim_arguments', 'sim_setup', 'torque_arguments', 'torque_setup',
           'view_inputs', 'view_inputs_line']

PACKAGE = 'plag_ros'
PLAYERS = ('plag', 'ros2')
"""replay.launch.py's bag players: ``plag-ros replay`` or ``ros2 bag play``."""
TF_MODES = ('auto', 'true', 'false')
"""replay.launch.py's ``robot_state_publisher:=``: when installed, always, never."""
DESCRIPTION_SOURCES = ('topic', 'file')
"""The dynamics node's model sources a launch argument may pick (``parameter`` needs the
URDF text as a parameter, which no launch argument carries)."""


@dataclass(frozen=True)
class LaunchArgument:
    """One argument of a launch file (``name:=value`` on the ``ros2 launch`` line).

    ``default`` is None for an argument the user must give. ``in_share`` marks a default
    that is a path relative to the package's installed share directory. ``choices``, where
    given, are the only values launch accepts (it refuses any other before anything
    starts); a ``boolean`` argument is read by launch's ``IfCondition``, which takes
    ``true``/``false``/``1``/``0`` in any case, so it has no choices list.
    """

    name: str
    description: str
    default: str | None = None
    choices: tuple[str, ...] = ()
    boolean: bool = False
    in_share: bool = False


_CONTROL = LaunchArgument('control', 'start the partial-impedance controller', 'false',
                          boolean=True)
_RVIZ = LaunchArgument('rviz', 'start rviz2 with the plag_ros displays', 'false',
                       boolean=True)
_PARAMS_FILE = LaunchArgument(
    'params_file', 'a ROS 2 parameter file (YAML) of your own, given to every plag_ros node '
    'after its bundled config/ file: its values win over the bundled ones, the launch '
    "arguments' and the launch file's own settings win over it; '' = the bundled files "
    'alone', '')
_NAMESPACE = LaunchArgument(
    'namespace', "the ROS namespace of every node this launch starts (arm1: /arm1/plag_dynamics, "
    "/arm1/joint_states, /arm1/controller_manager ...), for one arm's bring-up beside "
    "another's; /tf and /tf_static become <namespace>/tf and <namespace>/tf_static; '' = "
    'the root namespace', '')


def sim_arguments() -> list[LaunchArgument]:
    """The arguments of ``sim.launch.py``."""
    return [_CONTROL, _RVIZ, _PARAMS_FILE, _NAMESPACE]


def robot_arguments() -> list[LaunchArgument]:
    """The arguments of ``crane_x7.launch.py``."""
    return [
        _CONTROL,
        LaunchArgument('spawn_controller', f'with control:=true, load {CONTROLLER} inactive '
                       'into the controller_manager of the namespace (/controller_manager '
                       "in the root; controller_manager's spawner)", 'true', boolean=True),
        _RVIZ,
        LaunchArgument('robot_description_source', "the nodes' model: 'topic' (the robot's "
                       "robot_description) or 'file' (bundled URDF)", 'topic',
                       DESCRIPTION_SOURCES),
        LaunchArgument('controllers_file', f'ros2_control parameter file of {CONTROLLER}; it '
                       'must exist on the machine running the controller manager',
                       'config/crane_x7_controllers.yaml', in_share=True),
        LaunchArgument('robot_state_publisher', 'run robot_state_publisher with the bundled '
                       "URDF on the robot's /joint_states (when its bring-up has none)",
                       'false', boolean=True),
        _PARAMS_FILE,
        _NAMESPACE,
    ]


def replay_arguments() -> list[LaunchArgument]:
    """The arguments of ``replay.launch.py``."""
    return [
        LaunchArgument('bag', 'rosbag2 bag directory (or .mcap/.db3 file) holding '
                       '/joint_states'),
        LaunchArgument('rate', 'playback speed', '1.0'),
        LaunchArgument('loop', 'replay forever', 'false', boolean=True),
        LaunchArgument('player', "'plag': plag-ros replay (no ROS CLI needed); 'ros2': ros2 "
                       'bag play', 'plag', PLAYERS),
        _RVIZ,
        LaunchArgument('control', 'start the partial-impedance controller on sim time (its '
                       'commands reach no robot)', 'false', boolean=True),
        LaunchArgument('robot_description_source', "the nodes' model: 'file' (bundled URDF) "
                       "or 'topic' (a robot_description published alongside)", 'file',
                       DESCRIPTION_SOURCES),
        LaunchArgument('robot_state_publisher', "/tf from the replayed joint states: 'auto' "
                       "(when installed), 'true' (required) or 'false'", 'auto', TF_MODES),
        _PARAMS_FILE,
        LaunchArgument('namespace', "the ROS namespace of every node this launch starts "
                       "and of the bag's topics (arm1: /arm1/joint_states ...); /clock stays "
                       "in the root, so two replays need two ROS_DOMAIN_IDs; '' = the root "
                       'namespace', ''),
    ]


def torque_arguments() -> list[LaunchArgument]:
    """The arguments of ``torque.launch.py``."""
    return [
        LaunchArgument('port', 'serial device of the servo bus (plag_driver replaces '
                       'crane_x7_control on it)', '/dev/ttyUSB0'),
        LaunchArgument('control', 'start the partial-impedance controller on the effort path '
                       '(~/enable puts the arm in current mode)', 'false', boolean=True),
        LaunchArgument('rviz', 'start rviz2 with the plag_ros displays (and '
                       'robot_state_publisher with the bundled URDF for its /tf)', 'false',
                       boolean=True),
        LaunchArgument('robot_description_source', "the nodes' model: 'file' (bundled URDF) "
                       "or 'topic' (the robot_description a robot_state_publisher of the "
                       "lab's own publishes)", 'file', DESCRIPTION_SOURCES),
        _PARAMS_FILE,
        _NAMESPACE,
    ]


def is_true(value: str) -> bool:
    """A boolean launch argument's value as launch's ``IfCondition`` reads it (``true`` or
    ``1``, any case)."""
    return value.strip().lower() in ('true', '1')


@dataclass(frozen=True)
class ReplayTf:
    """Whether replay.launch.py runs robot_state_publisher, and the start-up line that says
    why not (None where nothing needs saying: it runs, or ``false`` was asked for)."""

    runs: bool
    message: str | None = None


NO_TF = ('robot_state_publisher is not installed: the replay publishes no /tf, so rviz2 '
         'draws neither the arm nor the Effort arrows (install '
         'ros-<distro>-robot-state-publisher)')
"""What a replay says at start when ``robot_state_publisher:=auto`` finds none installed."""


def replay_tf(mode: str, installed: bool) -> ReplayTf:
    """robot_state_publisher on a replay: ``mode`` (:data:`TF_MODES`) and whether the
    machine has it installed.

    Raises:
        ValueError: an unknown mode, or ``true`` where it is not installed.
    """
    wanted = mode.strip().lower()
    if wanted not in TF_MODES:
        raise ValueError(f'replay.launch.py: robot_state_publisher:={mode!r}, expected one '
                         f'of {TF_MODES}')
    if wanted == 'false':
        return ReplayTf(False)
    if not installed:
        if wanted == 'true':
            raise ValueError('replay.launch.py: robot_state_publisher:=true, and '
                             'robot_state_publisher is not installed '
                             '(ros-<distro>-robot-state-publisher)')
        return ReplayTf(False, NO_TF)
    return ReplayTf(True)


_NAMESPACE_TOKENS = re.compile(r'(/[A-Za-z_][A-Za-z0-9_]*)+')


def namespace_of(text: str) -> str | None:
    """The ``namespace:=`` argument as a full namespace: None for '' and ``/`` (the root:
    the launch adds no namespace), ``/arm1`` for ``arm1``, ``/arm1`` and ``/arm1/``.

    Raises:
        ValueError: not a ROS namespace by rmw_validate_namespace's rules (tokens of
            letters, digits and ``_``, none starting with a digit, no empty token).
    """
    name = text.strip()
    if name in ('', '/'):
        return None
    full = name if name.startswith('/') else f'/{name}'
    full = full[:-1] if full.endswith('/') else full
    if not _NAMESPACE_TOKENS.fullmatch(full):
        raise ValueError(f'namespace:={text!r} is not a ROS namespace: tokens of letters, '
                         "digits and '_' separated by '/', none starting with a digit "
                         '(arm1, /lab/arm1)')
    return full


CLOCK = '/clock'
"""rclpy's clock topic (``CLOCK_TOPIC``, ros2/rclpy humble b488272 time_source.py:26):
absolute, so a replay's ``/clock`` stays in the root whatever its namespace."""


def namespaced_topic(topic: str, namespace: str | None) -> str:
    """A bag's (absolute) ``topic`` played into ``namespace`` (:func:`namespace_of`):
    ``/joint_states`` -> ``/arm1/joint_states``; ``/clock`` and the root keep it."""
    topic = topic if topic.startswith('/') else f'/{topic}'
    return topic if not namespace or topic == CLOCK else f'{namespace}{topic}'


def replay_remaps(topics: Sequence[str] | str, namespace: str | None) -> list[str]:
    """``ros2 bag play``'s ``--remap`` arguments that play every bag topic but ``/clock``
    into ``namespace`` (none in the root): what ``plag-ros replay --namespace`` does.

    ``topics`` is the bag's topics, or, for a bag whose topics cannot be listed, the reason
    (a str). Without the remaps ``ros2 bag play`` would publish the bag's absolute topics,
    ``/crane_x7_arm_controller/joint_trajectory`` among them, in the root namespace, where
    another arm's controllers listen: so in a namespace that raises ``ValueError``.
    """
    if isinstance(topics, str):
        if namespace:
            raise ValueError(
                f'namespace:={namespace.lstrip("/")} player:=ros2: the bag\'s topics cannot '
                f'be listed ({topics}), and without a --remap for each ros2 bag play would '
                'publish them in the root namespace, where the controllers of another arm may '
                'listen. Not playing: fix the bag, or use player:=plag.')
        return []
    pairs = [f'{topic}:={namespaced_topic(topic, namespace)}' for topic in sorted(topics)
             if namespaced_topic(topic, namespace) != topic]
    return ['--remap', *pairs] if pairs else []


def view_inputs(namespace: str | None = None) -> tuple[str, str]:
    """What rviz2's RobotModel and Effort displays need published (crane_x7.launch.py
    rviz:=true) for a launch in ``namespace`` (:func:`namespace_of`; None: the root), as
    full names: the launch's own node, which counts their publishers, sits in the root."""
    prefix = namespace or ''
    return f'{prefix}/tf', f'{prefix}/robot_description'


VIEW_INPUTS = view_inputs()
"""What rviz2's RobotModel and Effort displays need published in the root namespace."""


def view_inputs_line(published: Mapping[str, int],
                     inputs: Sequence[str] = VIEW_INPUTS) -> str:
    """crane_x7.launch.py's word, a few seconds after start with ``rviz:=true``, on what
    rviz2 will have to draw: ``published`` counts the publishers of each of ``inputs``
    (:func:`view_inputs`) in the graph."""
    missing = [topic for topic in inputs if not published.get(topic)]
    if not missing:
        return f'rviz2 inputs: {" and ".join(inputs)} are published'
    hint = ('' if inputs == VIEW_INPUTS else ' in its namespace (its bring-up with the same '
            'namespace and /tf remapped to tf)')
    return (f'rviz2 will show no arm and no Effort arrows: nothing publishes '
            f'{" or ".join(missing)}. Start the robot with crane_x7_examples demo.launch.py '
            f'(MoveIt runs robot_state_publisher){hint}, or add robot_state_publisher:=true')


def replay_player(player: str, *, ros2_on_path: bool) -> str:
    """The bag player ``player:=`` names, checked against what this machine has.

    Raises:
        ValueError: an unknown player, or ``ros2`` without a ``ros2`` executable on PATH.
    """
    if player not in PLAYERS:
        raise ValueError(f'replay.launch.py: player:={player!r}, expected one of {PLAYERS}')
    if player == 'ros2' and not ros2_on_path:
        raise ValueError('replay.launch.py: player:=ros2 needs `ros2 bag play` (ros2cli, '
                         'rosbag2), and no ros2 executable is on PATH; use player:=plag '
                         '(plag-ros replay)')
    return player


@dataclass(frozen=True)
class NodeSetup:
    """One plag_ros node of a setup.

    ``overrides`` values are plain YAML values (str, float, bool, lists of them); in a
    launch file a value may also be a launch substitution (a launch argument's value).
    ``fixed`` names parameters of the bundled file that make the setup what it is (torque
    mode's effort path through the driver, its fault policy): a user's ``params_file`` may
    not set them (:func:`check_params_file`).
    """

    executable: str
    name: str
    params_file: str
    overrides: Mapping[str, object] = field(default_factory=dict)
    remappings: Sequence[tuple[str, str]] = ()
    control_only: bool = False
    fixed: Sequence[str] = ()

    def runs(self, control: bool) -> bool:
        """Whether this node is started when the controller is (not) asked for."""
        return control or not self.control_only


def _dynamics(description_source: object, **overrides: object) -> NodeSetup:
    return NodeSetup('dynamics_node', 'plag_dynamics', 'crane_x7.yaml',
                     {'robot_description_source': description_source, **overrides})


def _impedance(params_file: str, description_source: object, **overrides: object
               ) -> NodeSetup:
    # one model source for every node of a setup: the controller's model is the one the
    # dynamics node decomposes with
    return NodeSetup('impedance_node', 'plag_impedance', params_file,
                     {'robot_description_source': description_source, **overrides},
                     control_only=True)


TORQUE_MODE_FIXED = ('command_interface', 'switch.method', 'switch.driver_node',
                     'switch.fallback', 'fault_action', 'resume_after_fault', 'gain_check')
"""The controller's parameters of config/torque_mode.yaml that a ``params_file:=`` may not
change in torque mode: the effort path enabled and disabled through plag_driver and handed
back to its position hold, a fault held with gravity and never resumed on its own, gains
outside the checked region refused. A file written for crane_x7.launch.py (position path,
controller_manager) would otherwise retune current mode without a word."""
DRIVER_FIXED = ('active_arm_controller',)
"""plag_driver's parameters of config/torque_mode.yaml that a ``params_file:=`` may not
change: the arm starts in position mode (a file starting it on the effort controller would
open the bus in current mode)."""


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
        _impedance('impedance.yaml', 'topic', robot_description_timeout=0.0,
                   **{'switch.method': 'sim'}),
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
        _impedance('impedance.yaml', description_source, **impedance),
    ]


def torque_setup(port: object = '/dev/ttyUSB0', description_source: object = 'file'
                 ) -> list[NodeSetup]:
    """Torque mode on the real CRANE-X7 (docs/concepts/torque-mode.md): our bus driver on
    ``port`` in place of the robot's, the dynamics node, the controller on the effort path
    with ``control`` (config/torque_mode.yaml, ``switch.method: driver``). All three take
    their model from ``description_source``: 'file' (the bundled URDF; this mode publishes
    no robot_description of its own) or 'topic'."""
    return [
        NodeSetup('driver_node', 'plag_driver', 'torque_mode.yaml',
                  {'port': port, 'robot_description_source': description_source},
                  fixed=DRIVER_FIXED),
        _dynamics(description_source),
        replace(_impedance('torque_mode.yaml', description_source), fixed=TORQUE_MODE_FIXED),
    ]


def replay_setup(description_source: object = 'file') -> list[NodeSetup]:
    """A recorded bag played with ``/clock``: dynamics node, controller with ``control``,
    both on the bag's time. The model comes from the bundled URDF by default: a bag of
    ``/joint_states`` rarely holds the robot's ``robot_description``. The controller's
    commands reach no robot: it runs to study what it would have sent."""
    return [
        _dynamics(description_source, use_sim_time=True),
        _impedance('impedance.yaml', description_source, use_sim_time=True),
    ]


def own_params_file(path: str) -> str | None:
    """``params_file:=`` checked before any node starts: None for '' (the bundled files
    alone), else the path.

    launch_ros itself skips a parameter file that is not there with a warning, and a node
    given a file rcl cannot read dies at start: a typo in the path would either run the
    nodes without the user's values or end in a parse error in one node's log. Here the
    launch ends at once with the reason instead.

    Raises:
        ValueError: no such file, not YAML, or YAML that is not a mapping of node names
            (or ``/**``) to their parameters.
    """
    if not path.strip():
        return None
    file = Path(path).expanduser()
    if not file.is_file():
        raise ValueError(f'params_file:={path}: no such file')
    try:
        content = yaml.safe_load(file.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise ValueError(f'params_file:={path}: not a readable YAML file ({err})') from None
    if not isinstance(content, dict) or not content or \
            not all(isinstance(section, dict) for section in content.values()):
        raise ValueError(f'params_file:={path}: not a ROS 2 parameter file (expected node '
                         'names, or /**, each with ros__parameters)')
    return str(file)


NAMESPACED_NAMES = ('command.topic', 'command.controller', 'switch.controller_manager',
                    'switch.sim_node', 'switch.driver_node')
"""plag_impedance's parameters that name another node or topic: relative ones resolve in
its namespace; an absolute one outside it would command or switch another arm (the node
refuses to start then: plag_ros.core.control.settings.foreign_names)."""


def check_params_file(own_file: str, setup: NodeSetup, overrides: Mapping[str, object],
                      namespace: str | None = None) -> None:
    """Refuse a user's parameter file that sets what the launch decides for ``setup``.

    The launch's own settings come after the user's file and win (:func:`parameter_layers`),
    so a value there would be dropped without a word: a ``port`` in the file while the
    ``port:=`` argument (default /dev/ttyUSB0) opens another arm's bus, or a model source
    other than the one every node of the setup shares. And ``setup.fixed`` may not be set
    at all. The node's sections are those that reach its full name as rclpy matches them
    (:func:`node_section`: its name and ``/name`` in the root, ``/**``, ``/**/name`` ...);
    nested keys count dotted (``switch: {method: x}`` is ``switch.method``).

    In a ``namespace`` (:func:`namespace_of`) a section keyed by the bare name (``name:``,
    ``/name:``) reaches the root's node only: the node would start without the file's
    values, so it is refused (key it ``/**/name:``); and so is an absolute name of
    :data:`NAMESPACED_NAMES` outside the namespace (``/controller_manager``: another arm's).

    Args:
        own_file: the checked ``params_file`` (:func:`own_params_file`).
        setup: the node.
        overrides: ``setup.overrides`` with their values at launch time (a launch
            argument's text is read as YAML, as launch_ros hands it to the node).
        namespace: the launch's namespace; None: the root.

    Raises:
        ValueError: naming each such parameter, its value in the file and the launch's.
    """
    content = yaml.safe_load(Path(own_file).read_text())
    full = f'{namespace or ""}/{setup.name}'
    given = _dotted(node_section(content, setup.name, namespace or '/') or {})
    misplaced = [f'its section {key!r} does not reach {full} (key it /**/{setup.name})'
                 for key in content if isinstance(key, str)
                 and key.lstrip('/') == setup.name and not section_reaches(key, full)]
    misplaced += [f"{key} ({value!r}) is another arm's (give a relative name)"
                  for key, value in given.items()
                  if namespace and key in NAMESPACED_NAMES and isinstance(value, str)
                  and value.startswith('/') and not value.startswith(f'{namespace}/')]
    if misplaced:
        raise ValueError(f'params_file:={own_file} for {setup.name} in namespace '
                         f'{namespace}: ' + '; '.join(misplaced))
    problems = []
    for key, value in given.items():
        if key in setup.fixed:
            problems.append(f'{key} ({value!r}) is fixed by {setup.params_file} in this '
                            'launch file')
        elif key in overrides:
            launch = overrides[key]
            launch = yaml.safe_load(launch) if isinstance(launch, str) else launch
            if launch != value:
                problems.append(f'{key} is {value!r} there, but this launch sets it to '
                                f'{launch!r} (a launch argument, or what the setup needs)')
    if problems:
        raise ValueError(f'params_file:={own_file} for {setup.name}: '
                         + '; '.join(problems) + '; leave it out of the file (give a '
                         'launch argument where there is one)')


def _dotted(parameters: Mapping[str, object], prefix: str = '') -> dict[str, object]:
    """Nested parameter mappings flattened to dotted names, as ROS reads them."""
    flat: dict[str, object] = {}
    for key, value in parameters.items():
        name = f'{prefix}{key}'
        if isinstance(value, dict):
            flat.update(_dotted(value, f'{name}.'))
        else:
            flat[name] = value
    return flat


def parameter_layers(setup: NodeSetup, own_file: str | None = None
                     ) -> list[str | dict[str, object]]:
    """A node's parameters in the order they are handed to it, later ones winning where
    they set the same name (rcl applies ``--params-file`` and ``-p`` in order): the bundled
    file (its name under config/), the user's ``params_file:=`` where given, then the
    setup's overrides (the launch arguments' values and what the setup fixes, e.g. the
    simulator's ``switch.method: sim``), where it has any. Without ``own_file`` the launch
    files' nodes get what they got before ``params_file`` existed."""
    layers: list[str | dict[str, object]] = [setup.params_file]
    if own_file:
        layers.append(own_file)
    if setup.overrides:
        layers.append(dict(setup.overrides))
    return layers


def running(setups: Sequence[NodeSetup], control: bool) -> list[NodeSetup]:
    """The nodes of ``setups`` started with the controller on (``control``) or off."""
    return [setup for setup in setups if setup.runs(control)]
