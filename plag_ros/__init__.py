"""plag_ros: partial Lagrangian inverse dynamics and partial-impedance control for ROS 2.

Four layers, each importing only the ones below it (``docs/layers.md``):

* :mod:`plag_ros.core`: the physics and the control law (model, engine, estimation,
  plausibility, controller, simulator, analysis); no ROS import.
* :mod:`plag_ros.io`: bags and npz files, through ``rosbags``; no rclpy.
* :mod:`plag_ros.ros`: the ROS 2 adapter (messages, topics, parameters, the nodes).
* :mod:`plag_ros.apps`: the ``plag-ros`` command line.
"""

__all__ = ['__version__']

__version__ = '0.1.0'
