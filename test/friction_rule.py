"""The friction report's rule written out from its statement, for the tests' expectations.

Independent of :func:`plag_ros.core.estimation.friction.report_friction` (the code under test): a
joint with Coulomb friction f > 0 whose |qd| is inside the band is at rest and reports its stick
reaction clip(motor torque - rigid torque, -f, f) when its own effort is known, else 0; any other
joint reports the model's d qd + f sign(qd). The band itself is checked against the estimator in
test_friction.py.
"""
from __future__ import annotations

import numpy as np


def expected_friction(model, qd, torque, band, motor_torque=None) -> np.ndarray:
    """(..., n) friction to expect for estimated ``qd`` and rigid ``torque`` (..., n).

    ``motor_torque`` (..., n): the measured motor torque, NaN where a joint has none of its
    own; None: no joint has one."""
    qd = np.asarray(qd, dtype=np.float64)
    model_value = model.damping * qd + model.friction * np.sign(qd)
    rest = (np.abs(qd) <= band) & (model.friction > 0)
    if motor_torque is None:
        return np.where(rest, 0.0, model_value)
    reaction = np.asarray(motor_torque, dtype=np.float64) - torque
    known = np.isfinite(reaction)
    stick = np.minimum(np.maximum(np.where(known, reaction, 0.0), -model.friction),
                       model.friction)
    return np.where(rest & known, stick, np.where(rest, 0.0, model_value))
