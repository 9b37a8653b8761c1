"""The model's figures from recordings (imports :mod:`..dynamics`).

* :mod:`.excitation`: trajectories that excite the parameters, within the servos' limits;
* :mod:`.fit`: the physically consistent fit of inertial, friction and armature figures;
* :mod:`.drive`: the servos' position-loop stiffness and the effort scale;
* :mod:`.selection`: the prior's width and the offsets chosen by cross-validation.
"""
