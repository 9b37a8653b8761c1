"""plag_ros: partial Lagrangian inverse dynamics and partial-impedance control for ROS 2.

The physics modules (:mod:`plag_ros.model`, :mod:`plag_ros.dynamics`,
:mod:`plag_ros.filters`, :mod:`plag_ros.control`, :mod:`plag_ros.simulation`) import no
ROS code; :mod:`plag_ros.messages` is the one place arrays meet ROS messages, and the nodes
in :mod:`plag_ros.nodes` are thin wrappers over the library.
"""

__all__ = ['__version__']

__version__ = '0.1.0'
