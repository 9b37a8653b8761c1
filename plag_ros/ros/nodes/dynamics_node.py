"""``plag_dynamics``: live partial Lagrangian decomposition of the CRANE-X7's joint states.

Per ``joint_states`` message: map it onto the model by joint name (mimic joints filled),
estimate velocity and acceleration (:class:`plag_ros.core.estimation.filters.JointStateEstimator`),
decompose the torques ([PL] eq. 6, [MPF] eq. 10; :mod:`plag_ros.core.decomposition.live`) and
publish, stamped with the input stamp (or the arrival time with ``stamp_source: receive``).
Its topics, their types, QoS and content: :data:`plag_ros.ros.interfaces.DYNAMICS`.

Each accepted sample publishes every array and component right after ``~/joint_states``
(which carries the stamp); the acceleration, velocity and gravity components add up to its
effort. Per-body states, markers and image (rviz2) come at most
``visualization_rate_hz``; ``output_rate_hz`` decimates all outputs, not the estimator.
(*) At rest: the stick reaction from the measured effort, or 0 without one
(:mod:`plag_ros.core.estimation.friction`). The model comes from ``robot_description_source``
(``'topic'``, falling back to ``urdf_path`` after ``robot_description_timeout`` s;
``'parameter'``; ``'file'``). ``low_latency: true`` serves ``joint_states`` on a thread of
its own (:mod:`plag_ros.ros.tuning`). Bad input is dropped, counted by reason and logged at
most every two seconds. The parameters are the options of
:class:`plag_ros.core.decomposition.settings.DynamicsSettings`.

[PL] Kusaka & Tanaka, Robotics 2022, doi:10.3390/robotics11060149.
[MPF] Gunji, Kusaka & Tanaka, Robotics 2025, doi:10.3390/robotics14050054.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from rcl_interfaces.msg import SetParametersResult
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.publisher import Publisher
from rclpy.subscription import Subscription
from rclpy.timer import Timer
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float64MultiArray, String
from visualization_msgs.msg import MarkerArray

from plag_ros.core.common.options import build
from plag_ros.core.decomposition import live as live_core
from plag_ros.core.decomposition.settings import DynamicsSettings, dynamics_options
from plag_ros.core.dynamics.model import RobotModel
from plag_ros.core.dynamics.model_parameters import model_with_parameters
from plag_ros.ros import messages as msgs
from plag_ros.ros import qos, topics, tuning
from plag_ros.ros.input_thread import InputThread
from plag_ros.ros.nodes import spin_node
from plag_ros.ros.parameters import declare_options, option_values
from plag_ros.ros.rclpy_compat import quiet_publisher

__all__ = ['ARRAY_TOPICS', 'NODE_NAME', 'OPTIONS', 'REJECTION_REASONS', 'DynamicsNode', 'main']

NODE_NAME = topics.DYNAMICS_NODE_NAME
ARRAY_TOPICS = topics.ARRAY_TOPICS
"""Float64MultiArray outputs under ``~/`` (their one source is :mod:`plag_ros.ros.topics`)."""
OPTIONS = dynamics_options()
"""The node's parameters (config/crane_x7.yaml sets what differs on the robot)."""
_VISUALS = {'marker_scale', 'image_cell', 'image_limit'}
REJECTION_REASONS = live_core.REJECTION_REASONS


class DynamicsNode(Node):
    """Joint states in; filtered state and partial Lagrangian decomposition out.

    Args:
        **kwargs: passed to ``rclpy.node.Node`` (e.g. ``parameter_overrides``,
            ``context``, ``namespace``).

    Raises:
        ValueError: inconsistent parameters (the message names the parameter).
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(NODE_NAME, **kwargs)
        try:
            self.settings: DynamicsSettings = build(DynamicsSettings,
                                                    declare_options(self, OPTIONS))
        except ValueError as err:
            raise ValueError(f'{self.get_name()}: {err}') from err
        s = self.settings
        # Held by the joint_states callback and by everything the executor runs that
        # touches its state (parameters, diagnostics, a new model): with low_latency the
        # two run in different threads.
        self._lock = threading.Lock()
        self._stats = live_core.LiveStats(self.get_logger().warning)
        self._decimator = live_core.OutputDecimator(s.output_rate_hz)
        self._vis_period_ns = live_core.period_ns(s.visualization_rate_hz)
        self._receive_stamps = s.receive_stamps
        self._last_vis_ns = 0
        self._input: InputThread | None = None
        self._diagnostics_due = False   # before the model: a first sample may come at once
        self._live: live_core.LiveDecomposition | None = None
        self._model_source = 'none'
        self.add_on_set_parameters_callback(self._on_set_parameters)

        # Outputs (relative names under the node's private namespace).
        reliable, latched = qos.reliable(s.output_depth), qos.LATCHED
        self._pub_state = self.create_publisher(JointState, f'~/{topics.STATE_TOPIC}', reliable)
        self._pub_arrays = {name: quiet_publisher(self, Float64MultiArray, f'~/{name}',
                                                        reliable)
                            for name in ARRAY_TOPICS}
        self._pub_components = {
            name: quiet_publisher(self, JointState, f'~/{topics.COMPONENT_PREFIX}{name}',
                                        reliable)
            for name in (topics.COMPONENT_TOPICS if s.publish_components else ())}
        self._pub_names = self.create_publisher(String, f'~/{topics.NAMES_TOPIC}', latched)
        # (rclpy's entities are generic from Kilted on only: plain annotations)
        self._pub_bodies: dict[str, Publisher] = {}
        self._pub_markers = quiet_publisher(self, MarkerArray, f'~/{topics.MARKERS_TOPIC}',
                                                  reliable)
        self._pub_image = quiet_publisher(self, Image, f'~/{topics.IMAGE_TOPIC}', reliable)
        self._pub_diag = quiet_publisher(self, DiagnosticArray, '/diagnostics', reliable)

        # Inputs. joint_states is subscribed once a model exists (see _set_model), so
        # samples that come before robot_description are not taken, not dropped as bad.
        self._input_qos = qos.reliable(s.input_queue_depth)
        self._sub_state: Subscription | None = None
        self._fallback_timer: Timer | None = None
        if s.description.robot_description_source == 'file':
            self._load_file('file')
        elif s.description.robot_description_source == 'parameter':
            self._set_model(self._with_parameters(
                RobotModel.from_urdf(s.description.robot_description)), 'parameter')
        else:
            self._sub_description = self.create_subscription(
                String, 'robot_description', self._on_description,
                qos.LATCHED)
            timeout = s.description.robot_description_timeout
            if timeout > 0.0:
                self._fallback_timer = self.create_timer(timeout, self._on_description_timeout)
            self.get_logger().info('waiting for robot_description (fallback to the URDF file '
                                   f'after {timeout:g} s)' if timeout > 0.0 else
                                   'waiting for robot_description')
        self._diag_timer = self.create_timer(s.diagnostics_period, self._on_diagnostics_timer)

    # ------------------------------------------------------------------ public state
    @property
    def model(self) -> RobotModel | None:
        """The robot model in use; None while waiting for ``robot_description``."""
        return self._live.model if self._live is not None else None

    @property
    def model_source(self) -> str:
        """``'none'``, ``'topic'``, ``'parameter'``, ``'file:<path>'``, ``'fallback:<path>'``."""
        return self._model_source

    @property
    def rejected(self) -> dict[str, int]:
        """Rejected ``joint_states`` per reason since start (``rejected.*`` of /diagnostics)."""
        return self._stats.reject.counts

    @property
    def callback_errors(self) -> int:
        """joint_states callbacks that raised on the input thread (logged, not fatal)."""
        return self._input.errors if self._input is not None else 0

    def counters(self) -> dict[str, int]:
        """The counters of /diagnostics now: totals since start and ``rejected.<reason>``."""
        with self._lock:
            return self._stats.counters()

    # ------------------------------------------------------------------ parameters
    def _on_set_parameters(self, parameters: Sequence[Parameter]) -> SetParametersResult:
        try:
            new = build(DynamicsSettings, option_values(self, OPTIONS, parameters))
        except ValueError as err:
            return SetParametersResult(successful=False, reason=str(err))
        names = {p.name for p in parameters}
        with self._lock:
            self.settings = new
            if self._live is not None and any(n.startswith('filter.') for n in names):
                self._live.set_filter(new.filter)    # taken by the hot path's next sample
            self._vis_period_ns = live_core.period_ns(new.visualization_rate_hz)
            self._receive_stamps = new.receive_stamps
            self._decimator.set_rate(new.output_rate_hz)
            if self._live is not None and names & _VISUALS:
                self._build_visuals(self._live.model)
        return SetParametersResult(successful=True)

    # ------------------------------------------------------------------ model
    def _load_file(self, why: str) -> None:
        path = self.settings.description.file
        self._set_model(self._with_parameters(RobotModel.from_urdf(path)), f'{why}:{path}')

    def _with_parameters(self, model: RobotModel) -> RobotModel:
        """``model`` with the identified figures of ``model.parameters`` (if set)."""
        self._description = model.urdf_xml
        path = self.settings.model.parameters
        model, parameters = model_with_parameters(model, path)
        if parameters is not None:
            self.get_logger().info(parameters.summary())
        return model

    def _on_description(self, msg: String) -> None:
        if self.model is not None and msg.data == self._description:
            return
        try:
            model = self._with_parameters(RobotModel.from_urdf(msg.data))
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
        if self.model is None:
            timeout = self.settings.description.robot_description_timeout
            self.get_logger().warning(f'no robot_description received within {timeout} s; '
                                      'using the URDF file')
            self._load_file('fallback')

    def _set_model(self, model: RobotModel, source: str) -> None:
        """Build the pipeline and constant message parts for ``model``.

        Under the lock the hot path holds per sample: a new model takes over between two
        samples, with a fresh estimate (its warm-up), never halfway through one."""
        replacing = self.model is not None
        with self._lock:
            self._build_model(model, source)
        if replacing:
            self.get_logger().warning(
                f'robot_description changed: model {model.name!r} from {source} replaces '
                'the previous model from the next sample on (the estimate starts afresh)')
        low_latency = self.settings.low_latency
        if self._sub_state is None:   # reliable, like the joint state broadcaster
            if low_latency:   # a thread and executor of its own, public rclpy API only
                tuning.lower_switch_interval()
                self._input = InputThread(self, JointState, 'joint_states',
                                          self.on_joint_state, self._input_qos,
                                          private_wait_set=self.settings.private_wait_set)
                self._sub_state = self._input.subscription
            else:
                self._sub_state = self.create_subscription(
                    JointState, 'joint_states', self.on_joint_state, self._input_qos)
        self.get_logger().info(f'model {model.name!r} from {source}: {model.n_joints} '
                               f'joints, {model.n_bodies} bodies, frame {self._frame_id!r}'
                               + (', joint_states on its own thread' if self._input else '')
                               + (' (private wait set)' if self._input is not None
                                  and self._input.private_wait_set else ''))

    def _build_model(self, model: RobotModel, source: str) -> None:
        live = live_core.LiveDecomposition(model, self.settings, self._stats, self._decimator)
        self._model_source = source
        self._reader = msgs.JointStateReader(model)
        self._frame_id = self.settings.frame_id or model.root_link
        self._messages = msgs.DecompositionMessages(model, frame_id=self._frame_id,
                                                    arrays=ARRAY_TOPICS,
                                                    components=tuple(self._pub_components))
        reliable = qos.reliable(self.settings.output_depth)
        for body in model.body_names:
            if body not in self._pub_bodies:
                self._pub_bodies[body] = quiet_publisher(self,
                    JointState, f'~/{topics.BODY_PREFIX}{body}', reliable)
        self._body_pubs = [self._pub_bodies[body] for body in model.body_names]
        self._build_visuals(model)
        zero = np.zeros(model.n_joints)
        for _ in range(3):   # first-call costs now, not on the first joint states
            out = live.warm_up()
            self._messages.fill(0, zero, zero, out)
            self._markers.serialize(live.engine.link_poses(zero),
                                    msgs.marker_components(out), t_ns=0)
            self._image.serialize(out['partial'], t_ns=0)
        self._live = live
        self._pub_names.publish(msgs.names_message(model))
        if self.settings.low_latency:
            tuning.freeze_startup_objects()

    def _build_visuals(self, model: RobotModel) -> None:
        s = self.settings
        self._markers = msgs.MarkerBuilder(model, frame_id=self._frame_id,
                                           scale=s.marker_scale)
        self._image = msgs.PartialImageBuilder(model.n_joints, model.n_bodies,
                                               cell=s.image_cell, limit=s.image_limit,
                                               frame_id=self._frame_id)

    # ------------------------------------------------------------------ hot path
    def on_joint_state(self, msg: JointState) -> None:
        """The ``joint_states`` callback (public: a test or a benchmark may feed it)."""
        t_in = time.perf_counter_ns()
        with self._lock:
            self._take_joint_state(msg, t_in)
        if self._diagnostics_due:
            self._diagnostics_due = False
            self.publish_diagnostics()

    def _take_joint_state(self, msg: JointState, t_in: int) -> None:
        window = self._stats.window
        window.received += 1
        live = self._live
        if live is None:   # joint_states is subscribed only once a model exists
            raise RuntimeError('joint_states taken before a robot model')
        try:
            t_ns, q, qd_measured, _ = self._reader.read(msg, velocity=live.velocity_needed())
        except msgs.JointStateError as err:
            self._stats.reject(err.reason, str(err))
            return
        if self._receive_stamps:
            t_ns = self.get_clock().now().nanoseconds
        result = live.step(t_ns, q, qd_measured, self._reader.optional_effort, msg)
        if result is None:
            return
        self._publish(t_ns, *result)
        done = time.perf_counter_ns()
        window.published += 1
        window.processing_ns.append(done - t_in)
        # Input stamp to publish done on the node's clock (wall time, or /clock on replays).
        window.latency_ns.append(self.get_clock().now().nanoseconds - t_ns)

    def _publish(self, t_ns: int, sample, out: dict[str, np.ndarray]) -> None:
        live = self._messages
        visual = bool(self._vis_period_ns) and t_ns - self._last_vis_ns >= self._vis_period_ns
        bodies = self.settings.publish_bodies and visual
        live.fill_state(t_ns, sample.q, sample.qd, out['torque'])
        self._pub_state.publish(live.joint_state)     # first: it carries the stamp
        live.fill_arrays(out, bodies=bodies, t_ns=t_ns)
        for name, publisher in self._pub_arrays.items():
            publisher.publish(live.arrays[name])
        for name, publisher in self._pub_components.items():
            publisher.publish(live.components[name])
        if bodies:
            # Per-body columns are for rviz2 (the whole table is on ~/partial every
            # sample): at the visualization rate they cost 9 publishes per 20 Hz, not per
            # sample (measured: 0.60 -> 0.34 cores at 200 Hz, no drops at 500 Hz).
            for publisher, message in zip(self._body_pubs, live.bodies, strict=True):
                publisher.publish(message)
        if visual:
            self._last_vis_ns = t_ns
            poses = self._live.engine.link_poses(sample.q)  # type: ignore[union-attr]
            # serialized from a CDR template: 45 rclpy Marker objects cost ~0.9 ms to convert
            self._pub_markers.publish(self._markers.serialize(
                poses, msgs.marker_components(out), t_ns=t_ns))
            self._pub_image.publish(self._image.serialize(out['partial'], t_ns=t_ns))

    # ------------------------------------------------------------------ diagnostics
    def _on_diagnostics_timer(self) -> None:
        # With the input thread a sample arriving while the executor builds the diagnostics
        # (~1 ms, cold caches) waits for the GIL: while samples flow the input thread
        # publishes them after a sample instead; else the timer does.
        with self._lock:
            flowing = self._stats.window.received > 0
        if self._input is not None and flowing and not self._diagnostics_due:
            self._diagnostics_due = True
        else:
            self._diagnostics_due = False
            self.publish_diagnostics()

    def publish_diagnostics(self) -> DiagnosticArray:
        """Close the counting window, publish its /diagnostics report and return it."""
        with self._lock:
            live = self._live
            snapshot = self._stats.close_window(
                callback_errors=self.callback_errors,
                model=live.report_values(self._model_source) if live is not None else None)
            config = self.settings.filter
        report = self._stats.report(snapshot, config)
        if report.log_warning:
            self.get_logger().warning(report.log_warning)
        level = getattr(msgs.DiagnosticLevel, report.level.upper())
        status = msgs.diagnostic_status(
            f'{self.get_fully_qualified_name()}: decomposition', level, report.message,
            report.values, hardware_id=live.model.name if live is not None else '')
        array = msgs.diagnostic_array([status], t_ns=self.get_clock().now().nanoseconds)
        self._pub_diag.publish(array)
        return array


def main(args: list[str] | None = None) -> None:
    """Console script ``dynamics_node``: spin :class:`DynamicsNode` until shutdown."""
    spin_node(DynamicsNode, args)


if __name__ == '__main__':
    main()
