"""``plag_dynamics``: live partial Lagrangian decomposition of the CRANE-X7's joint states.

Per ``joint_states`` message: map it onto the model by joint name (mimic joints filled),
estimate velocity and acceleration (:class:`plag_ros.core.filters.JointStateEstimator`, seed
002 section 3), decompose the torques (:meth:`plag_ros.core.dynamics.PartialLagrangian.decompose`,
seed 000 eq. 6, seed 002 eq. 10) and publish, stamped with the input stamp (or the
arrival time with ``stamp_source: receive``):

==========================  =================================  ===============================
topic (relative)            type                               content
==========================  =================================  ===============================
``~/joint_states``          sensor_msgs/JointState             filtered q, qd; torque in effort
``~/partial``               std_msgs/Float64MultiArray         (joint, body) partial torques
``~/acceleration``          std_msgs/Float64MultiArray         (joint, body, source)
``~/velocity``              std_msgs/Float64MultiArray         (joint, body, source)
``~/gravity``               std_msgs/Float64MultiArray         (joint, body)
``~/friction``              std_msgs/Float64MultiArray         (joint,) friction (*)
``~/body/<body>``           sensor_msgs/JointState             partial[:, body] in effort (*)
``~/names``                 std_msgs/String (latched)          JSON index of every array
``~/markers``               visualization_msgs/MarkerArray     arrows per component and joint
``~/partial_image``         sensor_msgs/Image (rgb8)           heat map of the partial table
``/diagnostics``            diagnostic_msgs/DiagnosticArray    rates, latency, rejected counts
==========================  =================================  ===============================

Float64MultiArray has no header: every accepted sample publishes each array topic exactly
once, in the order above, right after ``~/joint_states`` carrying the stamp. (*) The
per-body JointStates, markers and the image are for rviz2 and are published at most
``visualization_rate_hz`` (the whole table is on ``~/partial`` every sample);
``output_rate_hz`` (default 0: every sample) decimates all outputs for fast inputs (1 kHz)
while the estimator still takes every sample.

(*) Friction is the model's ``d qd + f sign(qd)`` while a joint slides. Inside the rest
band (:func:`plag_ros.core.friction.rest_band`: the largest velocity the estimator makes of a
still joint's encoder flicker, 0.044 rad/s with the defaults) it is the stick reaction,
``clip(measured torque - rigid torque, -f, f)`` from the joint state's effort, or 0 when
the joint's effort is not measured (unresolved), never ``+-f`` from the sign of noise.
``/diagnostics`` counts the joint samples of each kind (``friction_stick``,
``friction_unresolved``).

The model comes from ``robot_description_source``: ``'topic'`` (default) subscribes to
``robot_description`` (transient local, as robot_state_publisher and the CRANE-X7 bring-up
publish it) and falls back to ``urdf_path`` (or the bundled URDF) after
``robot_description_timeout`` seconds (a description arriving later still replaces the
fallback model); ``'parameter'`` parses the ``robot_description``
parameter; ``'file'`` loads ``urdf_path`` (or the bundled URDF) at once.

With ``low_latency: true`` (opt-in, :mod:`.tuning`) ``joint_states`` is served by a thread
of its own (:class:`.input_thread.InputThread`), not by the executor that spins the node,
which serves the parameters, the timers and ``robot_description``; a lock keeps the two
apart.

Bad input (unknown/missing/repeated joint names, length mismatches, NaN, stamps that do
not increase) is dropped, counted by reason in ``/diagnostics`` and logged at most once
per reason every two seconds; it never yields a NaN or a partial message.

Size (over ~600 lines): one node class; its declared-parameter table and the hot path
make up most of it, the physics lives in the library.
"""
from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence

import numpy as np
import torch
from diagnostic_msgs.msg import DiagnosticArray
from rcl_interfaces.msg import (
    ParameterDescriptor,
    ParameterType,
    SetParametersResult,
)
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.publisher import Publisher
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rclpy.subscription import Subscription
from rclpy.timer import Timer
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float64MultiArray, String
from visualization_msgs.msg import MarkerArray

from plag_ros.core.dynamics import PartialLagrangian
from plag_ros.core.filters import EstimatorConfig, JointStateEstimator
from plag_ros.core.friction import STICK, UNRESOLVED, RestFriction
from plag_ros.core.model import RobotModel, default_urdf_path
from plag_ros.core.plausibility import PLAUSIBILITY_REASONS, PlausibilityGate
from plag_ros.core.simulation import DEFAULT_POSITION_RESOLUTION
from plag_ros.ros import messages as msgs
from plag_ros.ros import topics, tuning
from plag_ros.ros.input_thread import InputThread
from plag_ros.ros.nodes import spin_node
from plag_ros.ros.parameters import PLAUSIBILITY_PARAMETERS, choice, plausibility_config
from plag_ros.ros.parameters import float_descriptor as _float
from plag_ros.ros.parameters import int_descriptor as _int
from plag_ros.ros.parameters import str_descriptor as _str
from plag_ros.ros.rclpy_compat import PublisherEventCallbacks, private_wait_set_problem

__all__ = ['REJECTION_REASONS', 'DynamicsNode', 'main']

NODE_NAME = topics.DYNAMICS_NODE_NAME

REJECTION_REASONS = ('unknown_name', 'missing_name', 'duplicate_name',
                     'length_mismatch', 'nonfinite', 'stamp_not_increasing',
                     'stamp_too_close', 'stamp_type', 'shape', 'missing_velocity',
                     'nonfinite_output', *PLAUSIBILITY_REASONS)
"""Keys of the rejected-input counters (``rejected.<reason>`` in ``/diagnostics``)."""

ARRAY_TOPICS = topics.ARRAY_TOPICS
"""Float64MultiArray outputs under ``~/`` (their one source is :mod:`plag_ros.ros.topics`)."""

_LOG_THROTTLE_S = 2.0
_DESCRIPTION_SOURCES = ('topic', 'parameter', 'file')


_ESTIMATOR = EstimatorConfig()   # the one source of the filter.* defaults

# name -> (default, descriptor); config/crane_x7.yaml sets what differs on the robot.
PARAMETERS: dict[str, tuple[object, ParameterDescriptor]] = {
    'robot_description_source': ('topic', _str(
        "where the model comes from: 'topic' (robot_description, transient local; falls "
        "back to urdf_path after robot_description_timeout), 'parameter' or 'file'",
        read_only=True, constraints="one of 'topic', 'parameter', 'file'")),
    'robot_description': ('', _str(
        "URDF XML, used when robot_description_source is 'parameter'", read_only=True)),
    'urdf_path': ('', _str(
        "URDF file for 'file' and the topic fallback; empty: the bundled crane_x7.urdf",
        read_only=True)),
    'robot_description_timeout': (5.0, _float(
        'seconds to wait for robot_description before falling back to urdf_path; 0 waits '
        'forever', 0.0, 3600.0, read_only=True)),
    'frame_id': ('', _str('frame of stamped outputs and markers; empty: the URDF root link',
                          read_only=True)),
    'filter.cutoff_hz': (_ESTIMATOR.cutoff_hz, _float(
        'low-pass -3 dB frequency [Hz], below rate_hz / 2', 0.01, 10000.0)),
    'filter.order': (_ESTIMATOR.order, _int('Butterworth order', 1, 8)),
    'filter.rate_hz': (_ESTIMATOR.rate_hz, _float(
        'nominal joint_states rate [Hz] the filter is designed for', 1.0, 100000.0)),
    'filter.gap_periods': (_ESTIMATOR.gap_periods, _float(
        'a stamp step above this many periods restarts the estimator', 1.0, 1e6)),
    'filter.velocity_source': (_ESTIMATOR.velocity_source, _str(
        "'position' differentiates positions; 'measured' filters joint_states velocity",
        constraints="one of 'position', 'measured'")),
    'filter.min_spacing_periods': (_ESTIMATOR.min_spacing_periods, _float(
        'stamp steps shorter than this many periods are rejected', 0.0, 0.999)),
    'filter.stencil_nodes': (_ESTIMATOR.stencil_nodes, _str(
        "velocity stencil nodes: 'grid' (the sample grid; stamp jitter taken as noise) or "
        "'stamps' (exact on any grid, amplifies quantisation noise)",
        constraints="one of 'grid', 'stamps'")),
    'friction.encoder_resolution': (DEFAULT_POSITION_RESOLUTION, _float(
        'encoder step [rad] that sets the rest band of the friction report (default: 4096 '
        'counts per turn)', 1e-12, 1.0, read_only=True)),
    'stamp_source': ('header', _str(
        "time of each sample: 'header' (the joint state stamp, as the driver's control cycle "
        "sets it) or 'receive' (this node's clock on arrival, for unstamped publishers)",
        constraints="one of 'header', 'receive'")),
    'output_rate_hz': (0.0, _float('max rate of the decomposition outputs [Hz] (stamp time); '
                                   'the estimator still takes every sample. 0: every sample',
                                   0.0, 100000.0)),
    'visualization_rate_hz': (20.0, _float('max rate of ~/markers and ~/partial_image [Hz]; '
                                           '0 disables them', 0.0, 10000.0)),
    'marker_scale': (0.02, _float('arrow length per unit torque [m/(N*m)]', 0.0, 100.0)),
    'image_cell': (16, _int('pixels per cell of ~/partial_image', 1, 256)),
    'image_limit': (0.0, _float('colour saturation of ~/partial_image [N*m]; 0: auto per '
                                'image', 0.0, 1e6)),
    'publish_bodies': (True, ParameterDescriptor(
        type=ParameterType.PARAMETER_BOOL,
        description='publish ~/body/<body> (one JointState per body, at the '
                    'visualization rate)')),
    'diagnostics_period': (1.0, _float('period of /diagnostics [s]', 0.05, 3600.0,
                                       read_only=True)),
    'input_depth': (0, _int('history depth of the joint_states subscription (reliable, keep '
                            'last); 0: 250 ms of input at filter.rate_hz, at least 50 (50 at '
                            '200 Hz)', 0, 100000, read_only=True)),
    # A reliable keep-last writer drops samples a slow reader has not acknowledged once its
    # history is full: 100 keeps 0.5 s at 200 Hz, so rviz2 or a recorder can lag briefly.
    'output_depth': (100, _int('history depth of every reliable output topic', 1, 100000,
                               read_only=True)),
    'low_latency': (False, ParameterDescriptor(
        type=ParameterType.PARAMETER_BOOL, read_only=True,
        description=tuning.LOW_LATENCY_DESCRIPTION)),
    'torch_threads': (1, _int('torch intra-op threads (1 is fastest for single samples)', 1,
                              256, read_only=True)),
    **PLAUSIBILITY_PARAMETERS,
}


class _Window:
    """Counters and latency samples over one diagnostics period."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.received = 0
        self.published = 0
        self.decimated = 0
        self.latency_ns: list[int] = []      # input stamp -> publish done (wall clock)
        self.friction_stick = 0              # joint samples reported as a stick reaction
        self.friction_unresolved = 0         # ... at rest with no effort of their own
        self.stamps = 0                      # readable samples, and their first/last stamp
        self.first_stamp_ns = 0
        self.last_stamp_ns = 0
        self.processing_ns: list[int] = []   # callback entry -> publish done


class DynamicsNode(Node):
    """Joint states in; filtered state and partial Lagrangian decomposition out.

    Args:
        **kwargs: passed to ``rclpy.node.Node`` (e.g. ``parameter_overrides``,
            ``context``, ``namespace``).
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(NODE_NAME, **kwargs)
        for name, (default, descriptor) in PARAMETERS.items():
            self.declare_parameter(name, default, descriptor)
        values = {name: self.get_parameter(name).value for name in PARAMETERS}
        error = self._check(values)
        if error:
            raise ValueError(f'{self.get_name()}: {error}')
        self._config = self._estimator_config(values)
        self._pending_config: EstimatorConfig | None = None
        self.add_on_set_parameters_callback(self._on_set_parameters)
        torch.set_num_threads(int(values['torch_threads']))

        self._frame_param = str(values['frame_id'])
        self._vis_period_ns = self._period_ns(values['visualization_rate_hz'])
        self._out_period_ns = self._period_ns(values['output_rate_hz'])
        self._next_out_ns = 0
        self._receive_stamps = values['stamp_source'] == 'receive'
        self._marker_scale = float(values['marker_scale'])
        self._publish_bodies = bool(values['publish_bodies'])
        self._image_cell = int(values['image_cell'])
        self._image_limit = float(values['image_limit'])
        self._plausibility = plausibility_config(values)
        self._encoder_resolution = float(values['friction.encoder_resolution'])

        self.rejected = dict.fromkeys(REJECTION_REASONS, 0)
        # Held by the joint_states callback and by everything the executor runs that
        # touches its state (parameters, diagnostics, a new model): with low_latency the
        # two run in different threads.
        self._lock = threading.Lock()
        self._low_latency = bool(values['low_latency'])
        self._input: InputThread | None = None
        self._diagnostics_due = False   # before the model: a first sample may come at once
        self._reported_errors = 0
        self._last_log: dict[str, float] = {}
        self._window = _Window()
        self._totals = {'received': 0, 'published': 0, 'decimated': 0, 'friction_stick': 0,
                        'friction_unresolved': 0}
        self._last_vis_ns = 0
        self._model: RobotModel | None = None
        self._model_source = 'none'

        # Outputs (relative names under the node's private namespace).
        self._output_depth = int(values['output_depth'])
        reliable = QoSProfile(depth=self._output_depth, reliability=ReliabilityPolicy.RELIABLE)
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self._pub_state = self.create_publisher(JointState, f'~/{topics.STATE_TOPIC}', reliable)
        self._pub_arrays = {name: self._quiet_publisher(Float64MultiArray, f'~/{name}',
                                                        reliable)
                            for name in ARRAY_TOPICS}
        self._pub_names = self.create_publisher(String, f'~/{topics.NAMES_TOPIC}', latched)
        # (rclpy's entities are generic from Kilted on only: plain annotations)
        self._pub_bodies: dict[str, Publisher] = {}
        self._pub_markers = self._quiet_publisher(MarkerArray, f'~/{topics.MARKERS_TOPIC}',
                                                  reliable)
        self._pub_image = self._quiet_publisher(Image, f'~/{topics.IMAGE_TOPIC}', reliable)
        self._pub_diag = self._quiet_publisher(DiagnosticArray, '/diagnostics', reliable)

        # Inputs. joint_states is subscribed once a model exists (see _set_model), so
        # samples that come before robot_description are not taken, not dropped as bad.
        depth = int(values['input_depth']) or max(50, math.ceil(0.25 * self._config.rate_hz))
        self._input_qos = QoSProfile(depth=depth, reliability=ReliabilityPolicy.RELIABLE)
        self._sub_state: Subscription | None = None
        self._fallback_timer: Timer | None = None
        source = values['robot_description_source']
        if source == 'file':
            self._load_file('file')
        elif source == 'parameter':
            self._set_model(RobotModel.from_urdf(str(values['robot_description'])),
                            'parameter')
        else:
            self._sub_description = self.create_subscription(
                String, 'robot_description', self._on_description,
                QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                           durability=DurabilityPolicy.TRANSIENT_LOCAL))
            timeout = float(values['robot_description_timeout'])
            if timeout > 0.0:
                self._fallback_timer = self.create_timer(timeout, self._on_description_timeout)
            self.get_logger().info('waiting for robot_description (fallback to the URDF file '
                                   f'after {timeout:g} s)' if timeout > 0.0 else
                                   'waiting for robot_description')
        self._diag_timer = self.create_timer(float(values['diagnostics_period']),
                                             self._on_diagnostics_timer)

    def _quiet_publisher(self, msg_type, topic: str, qos: QoSProfile):
        """A publisher without rclpy's default QoS event handlers.

        Each default handler joins the executor's wait set, which rclpy rebuilds for every
        callback: with ~20 output topics that costs ~1 ms per joint state at 200 Hz (half
        the node's CPU). ``~/joint_states`` and ``~/names`` keep them, so an incompatible
        QoS request on the node's outputs is still reported.
        """
        return self.create_publisher(
            msg_type, topic, qos,
            event_callbacks=PublisherEventCallbacks(use_default_callbacks=False))

    # ------------------------------------------------------------------ parameters
    @staticmethod
    def _period_ns(rate_hz: float) -> int:
        return int(1e9 / rate_hz) if rate_hz > 0.0 else 0

    @staticmethod
    def _estimator_config(values: dict) -> EstimatorConfig:
        return EstimatorConfig(
            cutoff_hz=float(values['filter.cutoff_hz']), order=int(values['filter.order']),
            rate_hz=float(values['filter.rate_hz']),
            gap_periods=float(values['filter.gap_periods']),
            velocity_source=choice(values, 'filter.velocity_source', ('position', 'measured')),
            min_spacing_periods=float(values['filter.min_spacing_periods']),
            stencil_nodes=choice(values, 'filter.stencil_nodes', ('grid', 'stamps')))

    @classmethod
    def _check(cls, values: dict) -> str:
        """'' when the parameter set is consistent, else what is wrong."""
        source = values['robot_description_source']
        if source not in _DESCRIPTION_SOURCES:
            return (f'robot_description_source must be one of {_DESCRIPTION_SOURCES}, '
                    f'got {source!r}')
        if values['stamp_source'] not in ('header', 'receive'):
            return f"stamp_source must be 'header' or 'receive', got {values['stamp_source']!r}"
        if source == 'parameter' and not str(values['robot_description']).strip():
            return "robot_description_source is 'parameter' but robot_description is empty"
        if values['urdf_path'] and source != 'parameter':
            from pathlib import Path
            if not Path(values['urdf_path']).is_file():
                return f"urdf_path {values['urdf_path']!r} is not a file"
        try:
            cls._estimator_config(values)
        except ValueError as err:
            return str(err)
        return ''

    def _on_set_parameters(self, parameters: Sequence[Parameter]) -> SetParametersResult:
        values = {name: self.get_parameter(name).value for name in PARAMETERS}
        values.update({p.name: p.value for p in parameters if p.name in PARAMETERS})
        error = self._check(values)
        if error:
            return SetParametersResult(successful=False, reason=error)
        names = {p.name for p in parameters}
        with self._lock:
            self._apply(values, names)
        return SetParametersResult(successful=True)

    def _apply(self, values: dict, names: set[str]) -> None:
        if any(name.startswith('filter.') for name in names):
            self._pending_config = self._estimator_config(values)  # applied by the hot path
        self._vis_period_ns = self._period_ns(values['visualization_rate_hz'])
        self._out_period_ns = self._period_ns(values['output_rate_hz'])
        self._receive_stamps = values['stamp_source'] == 'receive'
        self._marker_scale = float(values['marker_scale'])
        self._publish_bodies = bool(values['publish_bodies'])
        self._image_cell = int(values['image_cell'])
        self._image_limit = float(values['image_limit'])
        if self._model is not None and names & {'marker_scale', 'image_cell', 'image_limit'}:
            self._build_visuals(self._model)

    # ------------------------------------------------------------------ model
    def _load_file(self, why: str) -> None:
        path = self.get_parameter('urdf_path').value or str(default_urdf_path())
        self._set_model(RobotModel.from_urdf(path), f'{why}:{path}')

    def _on_description(self, msg: String) -> None:
        if self._model is not None and msg.data == self._model.urdf_xml:
            return
        try:
            model = RobotModel.from_urdf(msg.data)
        except (ValueError, FileNotFoundError) as err:
            self.get_logger().error(f'robot_description rejected: {err}')
            return
        self._set_model(model, 'topic')

    def destroy_node(self) -> None:
        # The input thread first: it must not call into the node while it is torn down.
        # (getattr: rclpy destroys a node whose constructor raised before _input was set)
        input_thread = getattr(self, '_input', None)
        if input_thread is not None:
            input_thread.destroy()
        super().destroy_node()

    def _on_description_timeout(self) -> None:
        if self._fallback_timer is not None:    # this callback is that timer's
            self._fallback_timer.cancel()
        if self._model is None:
            self.get_logger().warning('no robot_description received within '
                                      f"{self.get_parameter('robot_description_timeout').value}"
                                      ' s; using the URDF file')
            self._load_file('fallback')

    def _set_model(self, model: RobotModel, source: str) -> None:
        """Build engine, reader, estimator and constant message parts for ``model``.

        Under the lock the hot path holds per sample: a new model takes over between two
        samples, with a fresh estimate (its warm-up), never halfway through one."""
        replacing = self._model is not None
        with self._lock:
            self._build_model(model, source)
        if replacing:
            self.get_logger().warning(
                f'robot_description changed: model {model.name!r} from {source} replaces '
                'the previous model from the next sample on (the estimate starts afresh)')
        if self._sub_state is None:   # reliable, like the joint state broadcaster
            problem = private_wait_set_problem() if self._low_latency else ''
            if problem:
                self.get_logger().warning(
                    'low_latency: joint_states stays on the executor (the public path): '
                    f"this rclpy's private wait-set API is not the one checked ({problem})")
            if self._low_latency and not problem:
                tuning.lower_switch_interval()
                self._input = InputThread(self, JointState, 'joint_states',
                                          self._on_joint_state, self._input_qos)
                self._sub_state = self._input.subscription
            else:
                self._sub_state = self.create_subscription(
                    JointState, 'joint_states', self._on_joint_state, self._input_qos)
        self.get_logger().info(f'model {model.name!r} from {source}: {model.n_joints} '
                               f'joints, {model.n_bodies} bodies, frame {self._frame_id!r}'
                               + (', joint_states on its own thread' if self._input else ''))

    def _build_model(self, model: RobotModel, source: str) -> None:
        self._model = model
        self._model_source = source
        self._engine = PartialLagrangian(model, dtype=torch.float64)
        self._reader = msgs.JointStateReader(model)
        self._gate = PlausibilityGate(model, self._plausibility)
        self._new_estimator()
        self._frame_id = self._frame_param or model.root_link
        n = model.n_joints
        self._messages = msgs.DecompositionMessages(model, frame_id=self._frame_id,
                                                    arrays=ARRAY_TOPICS)
        reliable = QoSProfile(depth=self._output_depth, reliability=ReliabilityPolicy.RELIABLE)
        for body in model.body_names:
            if body not in self._pub_bodies:
                self._pub_bodies[body] = self._quiet_publisher(
                    JointState, f'~/{topics.BODY_PREFIX}{body}', reliable)
        self._body_pubs = [self._pub_bodies[body] for body in model.body_names]
        self._build_visuals(model)
        # Pay torch's and numpy's first-call costs now, not on the first joint states
        # (they take ~100 ms and would back up the input queue).
        # One sample's tables, rewritten per sample: _publish copies them into messages.
        self._tables = self._engine.empty_arrays()
        zero = np.zeros(n)
        for _ in range(3):
            out = self._engine.decompose_arrays(zero, zero, zero, out=self._tables)
            self._rest_friction.apply(out['friction'], zero, out['torque'], zero)
            self._messages.fill(0, zero, zero, out)
            self._markers.serialize(self._engine.link_poses(zero).numpy(),
                                    msgs.marker_components(out), t_ns=0)
            self._image.serialize(out['partial'], t_ns=0)
        self._pub_names.publish(msgs.names_message(model))
        if self._low_latency:
            tuning.freeze_startup_objects()

    def _new_estimator(self) -> None:
        """A fresh estimate for the current model and filter settings, and the friction
        report's rest band, which follows the filter."""
        assert self._model is not None
        self._estimator = JointStateEstimator(self._model.n_joints, self._config)
        self._estimator_counts = self._estimator.rejected
        self._rest_friction = RestFriction(self._model, self._config,
                                           position_resolution=self._encoder_resolution)

    def _build_visuals(self, model: RobotModel) -> None:
        self._markers = msgs.MarkerBuilder(model, frame_id=self._frame_id,
                                           scale=self._marker_scale)
        self._image = msgs.PartialImageBuilder(model.n_joints, model.n_bodies,
                                               cell=self._image_cell, limit=self._image_limit,
                                               frame_id=self._frame_id)

    # ------------------------------------------------------------------ hot path
    def _reject(self, reason: str, detail: str) -> None:
        self.rejected[reason] = self.rejected.get(reason, 0) + 1
        now = time.monotonic()
        if now - self._last_log.get(reason, -math.inf) >= _LOG_THROTTLE_S:
            self._last_log[reason] = now
            self.get_logger().warning(f'joint_states dropped ({reason}, '
                                      f'{self.rejected[reason]} so far): {detail}')

    def _on_joint_state(self, msg: JointState) -> None:
        t_in = time.perf_counter_ns()
        with self._lock:
            self._take_joint_state(msg, t_in)
        if self._diagnostics_due:
            self._diagnostics_due = False
            self._publish_diagnostics()

    def _take_joint_state(self, msg: JointState, t_in: int) -> None:
        window = self._window
        window.received += 1
        if self._pending_config is not None:
            if self._model is None:   # joint_states is subscribed only once a model exists
                raise RuntimeError('joint_states taken before a robot model')
            self._config, self._pending_config = self._pending_config, None
            self._new_estimator()
        measured = self._config.velocity_source == 'measured'
        try:
            t_ns, q, qd_measured, _ = self._reader.read(msg, velocity=measured)
        except msgs.JointStateError as err:
            self._reject(err.reason, str(err))
            return
        if self._receive_stamps:
            t_ns = self.get_clock().now().nanoseconds
        if window.stamps == 0:
            window.first_stamp_ns = t_ns
        window.stamps += 1
        window.last_stamp_ns = t_ns
        implausible = self._gate.check(t_ns, q, qd_measured)
        if implausible is not None:
            self._reject(implausible, f'sample stamped {t_ns} ns is beyond what the arm can do')
            return
        estimator = self._estimator
        sample = estimator.update(t_ns, q, qd_measured)
        if sample is None:
            counts = estimator.rejected
            if counts != self._estimator_counts:
                for reason, count in counts.items():
                    if count != self._estimator_counts[reason]:
                        self._reject(reason, f'estimator refused the sample stamped {t_ns} ns')
                self._estimator_counts = counts
            return
        if self._out_period_ns:
            # Decimated output: the estimator has seen every sample; decompose and publish
            # at most output_rate_hz (stamp time).
            if t_ns < self._next_out_ns:
                window.decimated += 1
                return
            # Keep the phase so the mean rate is output_rate_hz; resynchronise after a gap.
            self._next_out_ns += self._out_period_ns
            if self._next_out_ns <= t_ns:
                self._next_out_ns = t_ns + self._out_period_ns
        try:
            out = self._engine.decompose_arrays(sample.q, sample.qd, sample.qdd,
                                                out=self._tables)
        except ValueError as err:
            self._reject('nonfinite_output', str(err))
            return
        # The torque accumulates every table entry (torque = sum of partial = sum of the
        # acceleration, velocity and gravity parts), so a NaN or inf anywhere shows in it.
        if not math.isfinite(out['torque'].sum() + out['friction'].sum()):
            self._reject('nonfinite_output', 'decomposition overflowed')
            return
        # At rest, the stick reaction from the measured effort (or 0, unresolved), not
        # f sign(qd) of the encoder's flicker (plag_ros.core.friction).
        state = self._rest_friction.apply(out['friction'], sample.qd, out['torque'],
                                          self._reader.optional_effort(msg))
        window.friction_stick += int(np.count_nonzero(state == STICK))
        window.friction_unresolved += int(np.count_nonzero(state == UNRESOLVED))
        self._publish(t_ns, sample, out)
        done = time.perf_counter_ns()
        window.published += 1
        window.processing_ns.append(done - t_in)
        # Input stamp to publish done on the node's clock (wall time, or /clock on replays).
        window.latency_ns.append(self.get_clock().now().nanoseconds - t_ns)

    def _publish(self, t_ns: int, sample, out: dict[str, np.ndarray]) -> None:
        live = self._messages
        visual = bool(self._vis_period_ns) and t_ns - self._last_vis_ns >= self._vis_period_ns
        bodies = self._publish_bodies and visual
        live.fill_state(t_ns, sample.q, sample.qd, out['torque'])
        self._pub_state.publish(live.joint_state)     # first: it carries the stamp
        live.fill_arrays(out, bodies=bodies, t_ns=t_ns)
        for name, publisher in self._pub_arrays.items():
            publisher.publish(live.arrays[name])
        if bodies:
            # Per-body columns are for rviz2 (the whole table is on ~/partial every
            # sample): at the visualization rate they cost 9 publishes per 20 Hz, not per
            # sample (measured: 0.60 -> 0.34 cores at 200 Hz, no drops at 500 Hz).
            for publisher, message in zip(self._body_pubs, live.bodies, strict=True):
                publisher.publish(message)
        if visual:
            self._last_vis_ns = t_ns
            poses = self._engine.link_poses(sample.q).numpy()
            # serialized from a CDR template: 45 rclpy Marker objects cost ~0.9 ms to convert
            self._pub_markers.publish(self._markers.serialize(
                poses, msgs.marker_components(out), t_ns=t_ns))
            self._pub_image.publish(self._image.serialize(out['partial'], t_ns=t_ns))

    # ------------------------------------------------------------------ diagnostics
    def _on_diagnostics_timer(self) -> None:
        # With the input thread, a sample arriving while the executor builds the
        # diagnostics (~1 ms with cold caches) waits for the GIL: while samples flow, the
        # input thread publishes them right after a sample instead, in the gap before the
        # next one. When no sample came during the period the timer publishes them itself.
        with self._lock:
            flowing = self._window.received > 0
        if self._input is not None and flowing and not self._diagnostics_due:
            self._diagnostics_due = True
        else:
            self._diagnostics_due = False
            self._publish_diagnostics()

    def _publish_diagnostics(self) -> None:
        with self._lock:
            window, self._window = self._window, _Window()
            rejected = dict(self.rejected)
            estimator = ({'warming_up': self._estimator.warming_up,
                          'estimator_resets': self._estimator.resets}
                         if self._model is not None else {})
            for key in self._totals:
                self._totals[key] += getattr(window, key)
            totals = dict(self._totals)
            # A callback that raised on the input thread is logged and counted there (the
            # executor path would have ended the node instead): show it here too.
            errors = self._input.errors if self._input is not None else 0
            new_errors, self._reported_errors = errors - self._reported_errors, errors
        elapsed = max(time.monotonic() - window.start, 1e-9)
        latency = np.array(window.latency_ns, dtype=np.float64) * 1e-6
        processing = np.array(window.processing_ns, dtype=np.float64) * 1e-6

        def pct(x: np.ndarray, p: float) -> float:
            return float(np.percentile(x, p)) if x.size else math.nan

        rejected_total = sum(rejected.values())
        # The rate the driver really runs at, from the stamps (not from arrival): the
        # low-pass is designed for filter.rate_hz and runs as if samples were that far
        # apart, so its cut-off and delay scale with measured / nominal (plag_ros.core.filters).
        span_ns = window.last_stamp_ns - window.first_stamp_ns
        stamp_rate = (window.stamps - 1) * 1e9 / span_ns \
            if window.stamps > 1 and span_ns > 0 else math.nan
        nominal = self._config.rate_hz
        off_rate = math.isfinite(stamp_rate) and abs(stamp_rate / nominal - 1.0) > 0.2
        rate_message = (f'joint_states at {stamp_rate:.0f} Hz by their stamps, filter '
                        f'designed for {nominal:g} Hz (filter.rate_hz): cut-off and delay '
                        f'scale by {stamp_rate / nominal:.2f}; set filter.rate_hz to the '
                        'measured rate') if off_rate else ''
        values: dict[str, float | str] = {
            'stamp_rate_hz': stamp_rate,
            'filter_rate_hz': nominal,
            'effective_cutoff_hz': (self._config.cutoff_hz * stamp_rate / nominal
                                    if math.isfinite(stamp_rate) else math.nan),
            'input_rate_hz': window.received / elapsed,
            'output_rate_hz': window.published / elapsed,
            'latency_p50_ms': pct(latency, 50), 'latency_p99_ms': pct(latency, 99),
            'latency_max_ms': float(np.max(latency)) if latency.size else math.nan,
            'processing_p50_ms': pct(processing, 50),
            'processing_p99_ms': pct(processing, 99),
            **totals,
            'rejected': rejected_total,
            'callback_errors': errors,
        }
        values.update({f'rejected.{reason}': count for reason, count in rejected.items()})
        if self._model is not None:
            values.update({**estimator,
                           'model_source': self._model_source,
                           'joints': self._model.n_joints, 'bodies': self._model.n_bodies})
        if self._model is None:
            level, message = msgs.DiagnosticLevel.ERROR, 'no robot model'
        elif new_errors:
            level, message = msgs.DiagnosticLevel.ERROR, (
                f'joint_states callback raised {new_errors} times (see the log)')
        elif window.received == 0:
            level, message = msgs.DiagnosticLevel.WARN, 'no joint_states'
        elif off_rate:
            level, message = msgs.DiagnosticLevel.WARN, rate_message
        elif window.published + window.decimated < window.received:
            level, message = msgs.DiagnosticLevel.WARN, (
                f'{window.received - window.published - window.decimated} of '
                f'{window.received} joint_states not decomposed (warm-up or rejected)')
        else:
            level, message = msgs.DiagnosticLevel.OK, 'decomposing'
        if off_rate != getattr(self, '_rate_warned', False):   # log on change only
            self._rate_warned = off_rate
            if off_rate:
                self.get_logger().warning(rate_message)
        status = msgs.diagnostic_status(
            f'{self.get_fully_qualified_name()}: decomposition', level, message, values,
            hardware_id=self._model.name if self._model is not None else '')
        self._pub_diag.publish(msgs.diagnostic_array(
            [status], t_ns=self.get_clock().now().nanoseconds))


def main(args: list[str] | None = None) -> None:
    """Console script ``dynamics_node``: spin :class:`DynamicsNode` until shutdown."""
    spin_node(DynamicsNode, args)


if __name__ == '__main__':
    main()
