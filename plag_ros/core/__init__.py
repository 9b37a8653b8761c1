"""The ROS-free core, one package per concept (docs/layers.md draws who may import whom).

* :mod:`~plag_ros.core.common`: settings that describe themselves, counted rejections;
* :mod:`~plag_ros.core.dynamics`: the robot (URDF model, servos, identified figures) and the
  partial Lagrangian engine in its forms;
* :mod:`~plag_ros.core.estimation`: velocity and acceleration from positions, plausibility
  limits, friction at rest;
* :mod:`~plag_ros.core.control`: the partial-impedance law, its configuration, stability and
  monitors;
* :mod:`~plag_ros.core.simulation`: the simulated arm, its driver, the closed loop in one
  process;
* :mod:`~plag_ros.core.identification`: excitation and the fit of the model's figures;
* :mod:`~plag_ros.core.decomposition`: a recording or a live stream turned into torques,
  partial torques and propagation paths;
* :mod:`~plag_ros.core.studies`: the papers' experiments.

Nothing here imports ROS; the packages import each other only downwards.
"""
