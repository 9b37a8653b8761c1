"""The robot model a node that commands the arm takes once, at start.

``plag_impedance`` and ``plag_driver`` build their model in their constructor from
``robot_description_source`` (:class:`~plag_ros.core.dynamics.description.DescriptionSettings`):

* ``'topic'``: the robot's ``robot_description`` (transient local), waited for up to
  ``robot_description_timeout`` s (0: without end), then the URDF file, said in the log
  as a warning. A text that does not parse is logged and the wait goes on;
* ``'parameter'``: the ``robot_description`` parameter;
* ``'file'``: ``urdf_path``, or the bundled crane_x7.urdf.

The model is taken once: a model swapped under a running controller would change the
torques it commands from one sample to the next. A ``robot_description`` whose model
differs from the one taken (:meth:`RobotModel.changes_from`) is logged as an error and
counted in :attr:`StartModel.changed`; the node keeps its model until it is started again.
(``plag_dynamics``, which commands nothing, takes a new model between two samples.)
"""
from __future__ import annotations

import math
import time

from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from std_msgs.msg import String

from plag_ros.core.dynamics.description import DescriptionSettings
from plag_ros.core.dynamics.model import RobotModel
from plag_ros.ros.qos import LATCHED

__all__ = ['WAIT_POLL_S', 'StartModel']

WAIT_POLL_S = 0.1
"""Longest executor wait [s] while the node waits for ``robot_description``."""


class StartModel:
    """The model of ``node`` from ``settings``, taken in the constructor.

    Args:
        node: the node being built; it is spun on an executor of its own while waiting,
            so build this before any other entity of the node.
        settings: where the model comes from.

    Attributes:
        model: the model (before ``model.parameters`` are applied).
        source: ``'topic'``, ``'parameter'``, ``'file:<path>'`` or ``'fallback:<path>'``.
        received: ``robot_description`` messages after the model was taken.
        changed: those of them whose model differs from the one taken.

    Raises:
        ValueError, FileNotFoundError: a parameter or file URDF that does not load.
        KeyboardInterrupt: Ctrl-C while waiting (see :func:`plag_ros.ros.nodes.spin_node`).
    """

    def __init__(self, node: Node, settings: DescriptionSettings) -> None:
        self._log = node.get_logger()
        self.received = self.changed = 0
        self._taken: RobotModel | None = None
        self.source = ''
        source = settings.robot_description_source
        if source == 'parameter':
            self._taken = RobotModel.from_urdf(settings.robot_description)
            self.source = 'parameter'
        elif source == 'file':
            self._taken, self.source = RobotModel.from_urdf(settings.file), f'file:{settings.file}'
        # the topic is watched whatever the source: a robot that publishes another model
        # than the one taken is said in the log
        node.create_subscription(String, 'robot_description', self._on_description, LATCHED)
        if source == 'topic':
            self._wait(node, settings.robot_description_timeout)
        if self._taken is None:     # (the topic, none in time)
            self._log.warning(
                f'no robot_description within {settings.robot_description_timeout:g} s; the '
                f'model is the URDF file {settings.file}')
            self._taken = RobotModel.from_urdf(settings.file)
            self.source = f'fallback:{settings.file}'
        self.model: RobotModel = self._taken
        self._log.info(f'model {self.model.name!r} from {self.source}: '
                       f'{self.model.n_joints} joints')

    def _wait(self, node: Node, timeout: float) -> None:
        self._log.info('waiting for robot_description' +
                       (f' (the URDF file after {timeout:g} s)' if timeout > 0.0 else ''))
        deadline = time.monotonic() + timeout if timeout > 0.0 else math.inf
        executor = SingleThreadedExecutor(context=node.context)
        executor.add_node(node)
        try:
            while self._taken is None and node.context.ok():
                left = deadline - time.monotonic()
                if left <= 0.0:
                    return
                executor.spin_once(timeout_sec=min(WAIT_POLL_S, left))
        finally:
            executor.remove_node(node)
            executor.shutdown()

    def _on_description(self, msg: String) -> None:
        if self._taken is None:
            try:
                self._taken = RobotModel.from_urdf(msg.data)
            except (ValueError, FileNotFoundError) as err:
                self._log.error(f'robot_description rejected: {err}')
                return
            self.source = 'topic'
            return
        self.received += 1
        if msg.data == self._taken.urdf_xml:
            return
        try:
            changes = RobotModel.from_urdf(msg.data).changes_from(self._taken)
        except (ValueError, FileNotFoundError) as err:
            changes, why = None, f'it does not load: {err}'
        if changes is not None and not changes:
            return      # the same model, written otherwise (a xacro's output)
        if changes is not None:
            why = ('joints ' + ', '.join(sorted({*changes.added_joints, *changes.removed_joints,
                                                 *changes.changed_joints})) +
                   '; bodies ' + ', '.join(sorted({*changes.added_bodies,
                                                   *changes.removed_bodies,
                                                   *changes.changed_bodies})))
        self.changed += 1
        self._log.error(f'robot_description differs from the model this node took at start '
                        f'({self.source}): {why}. It keeps that model: start it again to take '
                        'the new one', throttle_duration_sec=10.0)
