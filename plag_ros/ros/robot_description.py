"""The robot model a node that commands the arm takes once, at start.

``plag_impedance`` and ``plag_driver`` build their model in their constructor from
``robot_description_source`` (:class:`~plag_ros.core.dynamics.description.DescriptionSettings`):

* ``'topic'``: the robot's ``robot_description`` (transient local), waited for up to
  ``robot_description_timeout`` s (0: without end), then the URDF file, said in the log
  as a warning. A text that does not load is logged and counted, and the wait goes on.
  While the node waits, every parameter change is refused (the settings were read
  before the wait; a change then would be reported set and never used);
* ``'parameter'``: the ``robot_description`` parameter;
* ``'file'``: ``urdf_path``, or the bundled crane_x7.urdf.

The model is taken once: a model swapped under a running controller would change the
torques it commands from one sample to the next. A ``robot_description`` whose model
differs from the one taken (:meth:`RobotModel.changes_from`) is logged as an error and
counted in :attr:`StartModel.changed`; the node keeps its model until it is started again,
and ``plag_impedance`` refuses ``~/enable`` meanwhile. (``plag_dynamics``, which commands
nothing, takes a new model between two samples.) Nothing a publisher sends stops the node:
a text that does not load is logged.
"""
from __future__ import annotations

import math
import time

from rcl_interfaces.msg import SetParametersResult
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from std_msgs.msg import String

from plag_ros.core.dynamics.description import DescriptionSettings
from plag_ros.core.dynamics.model import RobotModel
from plag_ros.ros.qos import LATCHED
from plag_ros.ros.rclpy_compat import signals_held

__all__ = ['WAIT_POLL_S', 'StartModel', 'urdf_from_text']

WAIT_POLL_S = 0.1
"""Longest executor wait [s] while the node waits for ``robot_description``."""


def urdf_from_text(text: str) -> RobotModel:
    """The model of a ``robot_description`` text, the topic's or the parameter's (a byte
    order mark and blank lines before it allowed). Never reads a file: a text that is no
    XML is refused.

    Raises:
        ValueError: not URDF XML, or a URDF the model refuses.
    """
    xml = text.lstrip('\ufeff \t\r\n')
    if not xml.startswith('<'):
        raise ValueError(f'not URDF XML (starts with {text[:20]!r})')
    return RobotModel.from_urdf(xml)


class StartModel:
    """The model of ``node`` from ``settings``, taken in the constructor.

    Args:
        node: the node being built, its parameters declared; it is spun on an executor of
            its own while waiting, so build this before any other entity of the node.
        settings: where the model comes from.

    Attributes:
        model: the model (before ``model.parameters`` are applied).
        source: ``'topic'``, ``'parameter'``, ``'file:<path>'`` or ``'fallback:<path>'``.
        waited_s: how long the node waited for ``robot_description`` [s].
        rejected: ``robot_description`` texts that did not load.
        received: ``robot_description`` messages after the model was taken.
        changed: those of them whose model differs from the one taken.
        difference: how the last description differs from the model taken, with what to
            do ('' when it is that model, or none came).

    Raises:
        ValueError, FileNotFoundError: a parameter or file URDF that does not load.
        KeyboardInterrupt: Ctrl-C while waiting (see :func:`plag_ros.ros.nodes.spin_node`).
        ExternalShutdownException: the context shut down while waiting.
    """

    def __init__(self, node: Node, settings: DescriptionSettings) -> None:
        self._log = node.get_logger()
        self.received = self.changed = self.rejected = 0
        self.waited_s = 0.0
        self.difference = ''
        self._digest: tuple[RobotModel | None, str] = (None, '')
        # the last text judged after start, and how it differed
        self._judged: tuple[str | None, str] = (None, '')
        self._taken: RobotModel | None = None
        self.source = ''
        source = settings.robot_description_source
        if source == 'parameter':
            self._taken = urdf_from_text(settings.robot_description)
            self.source = 'parameter'
        elif source == 'file':
            self._taken, self.source = RobotModel.from_urdf(settings.file), f'file:{settings.file}'
        # the topic is watched whatever the source: a robot that publishes another model
        # than the one taken is said in the log and in the node's state
        node.create_subscription(String, 'robot_description', self._on_description, LATCHED)
        if source == 'topic':
            self._wait(node, settings.robot_description_timeout)
        if self._taken is None:     # (the topic, none in time)
            self._log.warning(
                f'no robot_description within {settings.robot_description_timeout:g} s (its '
                f'publisher must be transient local); the model is the URDF file '
                f'{settings.file}')
            self._taken = RobotModel.from_urdf(settings.file)
            self.source = f'fallback:{settings.file}'
        self.model: RobotModel = self._taken
        self._log.info(f'model {self.model.name!r} from {self.source}: '
                       f'{self.model.n_joints} joints')

    def report(self, used: RobotModel) -> dict:
        """The ``model`` entry of a node's ``~/state``: ``source``, ``digest`` of ``used``
        (:meth:`RobotModel.digest` of the model the node computes with, ``model.parameters``
        applied), ``changed`` (:attr:`changed`)."""
        if self._digest[0] is not used:
            self._digest = (used, used.digest())
        return {'source': self.source, 'digest': self._digest[1], 'changed': self.changed}

    def _wait(self, node: Node, timeout: float) -> None:
        self._log.info('waiting for robot_description' +
                       (f' (the URDF file after {timeout:g} s)' if timeout > 0.0 else ''))
        start = time.monotonic()
        deadline = start + timeout if timeout > 0.0 else math.inf

        def starting(parameters) -> SetParametersResult:
            return SetParametersResult(successful=False, reason='the node is starting: it '
                                       'waits for robot_description; set it again then')

        node.add_on_set_parameters_callback(starting)
        executor: SingleThreadedExecutor | None = None
        try:
            with signals_held():    # a Ctrl-C now is raised once the executor is whole
                executor = SingleThreadedExecutor(context=node.context)
            executor.add_node(node)
            while self._taken is None:
                if not node.context.ok():
                    raise ExternalShutdownException()
                left = deadline - time.monotonic()
                if left <= 0.0:
                    break
                # (never a negative timeout: rclpy waits without end on one)
                executor.spin_once(timeout_sec=min(WAIT_POLL_S, left))
        except BaseException:
            if executor is not None:
                executor.remove_node(node)
                executor.shutdown()
            Node.destroy_node(node)      # half built: no process exit with it still alive
            raise
        executor.remove_node(node)
        executor.shutdown()
        node.remove_on_set_parameters_callback(starting)
        self.waited_s = time.monotonic() - start

    def _on_description(self, msg: String) -> None:
        if self._taken is not None and msg.data in (self._taken.urdf_xml, self._judged[0]):
            self.received += 1          # (a text judged before is not parsed again)
            self._judge(self._judged[1] if msg.data == self._judged[0] else '')
            return
        try:
            model = urdf_from_text(msg.data)
        except Exception as err:  # noqa: BLE001 - a publisher never stops this node
            model, error = None, f'{type(err).__name__}: {err}'
        if self._taken is None:
            if model is None:
                self.rejected += 1
                self._log.error(f'robot_description rejected: {error}')
                return
            self._taken, self.source = model, 'topic'
            return
        self.received += 1
        why = ''
        if model is None:
            why = f'it does not load ({error})'
        elif changes := model.changes_from(self._taken):
            why = ('joints ' + ', '.join(sorted({*changes.added_joints, *changes.removed_joints,
                                                 *changes.changed_joints})) +
                   '; bodies ' + ', '.join(sorted({*changes.added_bodies,
                                                   *changes.removed_bodies,
                                                   *changes.changed_bodies})))
        self._judged = (msg.data, why)
        self._judge(why)

    def _judge(self, why: str) -> None:
        """A description after start: ``why`` it differs from the model taken, '' when it
        is that model (perhaps written otherwise: a xacro's output)."""
        if not why:
            self.difference = ''
            return
        self.changed += 1
        advice = ('start it again to take the new one' if self.source == 'topic' or
                  self.source.startswith('fallback:') else
                  f'it took its model from {self.source}: give it the URDF the robot has, or '
                  'robot_description_source topic')
        self.difference = (f'robot_description differs from the model this node took at '
                           f'start ({why}); {advice}')
        self._log.error(f'{self.difference}. The node keeps its model',
                        throttle_duration_sec=10.0)
