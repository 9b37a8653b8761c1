"""The simulated CRANE-X7 and its driver (imports :mod:`..dynamics`, :mod:`..control`).

* :mod:`.simulator`: rigid-body dynamics with servos, friction and quantised sensors;
* :mod:`.stepping`: the simulator's physics step, compiled;
* :mod:`.driver`: the driver's side (controllers, rates, effort) the sim node runs;
* :mod:`.joint_trajectory`: a trajectory as ros2_controllers' JointTrajectoryController
  samples it;
* :mod:`.settings`: the sim node's options;
* :mod:`.closed_loop`: the controller against the simulator in one process.
"""
