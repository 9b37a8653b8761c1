"""The robot and its dynamics: the bottom of the core (imports only :mod:`..common`).

* :mod:`.model`: URDF -> frozen kinematic tree (:class:`~.model.RobotModel`), mimic joints
  and the actuated coordinates;
* :mod:`.motors`: the CRANE-X7's Dynamixel servos (stiffness, effort conversion, limits);
* :mod:`.model_parameters`: identified figures (``identified.yaml``) applied to a model;
* :mod:`.engine`: the partial Lagrangian engine (:class:`~.engine.PartialLagrangian`) with
  its forms: :mod:`.kernel` (compiled loop), :mod:`.arrays` (that loop on numpy arrays,
  without torch: what the nodes call), :mod:`.torch_form` (autograd),
  :mod:`.coriolis`, :mod:`.compact` (structural non-zeros), :mod:`.column_reuse`
  (extending a model without recomputing it);
* :mod:`.regressor`: torque linear in the inertial parameters.
"""
