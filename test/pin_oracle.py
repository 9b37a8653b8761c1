"""Pinocchio as an independent oracle: same URDF, joint-for-joint mapping to our model."""
from __future__ import annotations

import numpy as np
import pinocchio as pin

from plag_ros.model import RobotModel


class PinOracle:
    """Pinocchio model of a URDF, addressed in our model's joint order.

    Continuous joints have two configuration entries (cos, sin) in Pinocchio; every method
    here takes our (n,) angle vector and converts.
    """

    def __init__(self, urdf_xml: str, model: RobotModel) -> None:
        self.model = model
        self.pin = pin.buildModelFromXML(urdf_xml)
        self.data = self.pin.createData()
        names = [self.pin.names[j] for j in range(1, self.pin.njoints)]
        # pin joint j (1-based) <-> our joint index
        self.ours_of_pin = model.joint_index(names)
        self.pin_of_ours = np.argsort(self.ours_of_pin)

    def config(self, q: np.ndarray) -> np.ndarray:
        """Our (n,) positions -> Pinocchio configuration vector (nq,)."""
        out = np.zeros(self.pin.nq)
        for j in range(1, self.pin.njoints):
            angle = q[self.ours_of_pin[j - 1]]
            joint = self.pin.joints[j]
            if joint.nq == 2:
                out[joint.idx_q:joint.idx_q + 2] = (np.cos(angle), np.sin(angle))
            else:
                out[joint.idx_q] = angle
        return out

    def tangent(self, x: np.ndarray) -> np.ndarray:
        """Our (n,) velocities/torques -> Pinocchio order."""
        return x[self.ours_of_pin]

    def ours(self, x: np.ndarray) -> np.ndarray:
        """Pinocchio-ordered (n,) or (n, n) -> our order (rows and columns)."""
        x = np.asarray(x)
        idx = self.pin_of_ours
        return x[idx] if x.ndim == 1 else x[np.ix_(idx, idx)]

    def rnea(self, q, qd, qdd, model=None) -> np.ndarray:
        m = model or self.pin
        tau = pin.rnea(m, m.createData(), self.config(q), self.tangent(qd), self.tangent(qdd))
        return self.ours(tau)

    def single_body(self, body: int) -> pin.Model:
        """Copy of the model in which every body but ``body`` (ours) has zero inertia."""
        m = self.pin.copy()
        keep = int(self.pin_of_ours[self.model.body_joint[body]]) + 1
        for j in range(1, m.njoints):
            if j != keep:
                m.inertias[j] = pin.Inertia.Zero()
        return m

    def crba(self, q, model=None) -> np.ndarray:
        m = model or self.pin
        M = pin.crba(m, m.createData(), self.config(q))
        return self.ours(np.triu(M) + np.triu(M, 1).T)

    def dtau_dqd(self, q, qd, qdd, model=None) -> np.ndarray:
        m = model or self.pin
        d = m.createData()
        pin.computeRNEADerivatives(m, d, self.config(q), self.tangent(qd), self.tangent(qdd))
        return self.ours(np.array(d.dtau_dv))
