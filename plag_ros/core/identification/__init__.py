"""The model's figures from recordings (imports :mod:`..dynamics`).

* :mod:`.excitation`: trajectories that excite the parameters, within the servos' limits;
* :mod:`.fit`: the physically consistent fit of inertial, friction, armature and drive
  figures, with held-out error;
* :mod:`.selection`: the prior's width and the offsets chosen by cross-validation.
"""
