"""Pinocchio as an independent oracle: same URDF, joint-for-joint mapping to our model."""
from __future__ import annotations

import numpy as np
import pinocchio as pin

from plag_ros.core.dynamics.model import RobotModel


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


class PathForest:
    """Pinocchio's best single-call equivalent of the per-body split.

    One model holds, for each of our bodies, its own copy of the joints on its path to the
    root, with only that body massive (the copies share no joint). One
    ``computeRNEADerivatives`` per sample then gives, block by block, every body's torque
    ``tau_i``, mass matrix ``M_i`` (``dtau_i/dqdd``) and ``dtau_i/dqd``, from which the
    tables follow: ``acceleration[k, i, s] = M_i[k, s] qdd_s``, ``velocity[k, i, s] =
    1/2 dtau_i/dqd[k, s] qd_s`` (tau_i is quadratic in qd), ``gravity[k, i] = tau_i -
    M_i qdd - sum_s velocity[k, i, s]``. Needs one body per joint (the CRANE-X7, the chains
    of test/robots.py): Pinocchio lumps all links on a joint into one inertia.
    """

    def __init__(self, oracle: PinOracle) -> None:
        model, src = oracle.model, oracle.pin
        if sorted(int(j) for j in model.body_joint) != list(range(model.n_joints)):
            raise ValueError('PathForest needs exactly one body per joint')
        self.oracle = oracle
        self.forest = pin.Model()
        self.forest.gravity = src.gravity
        self.paths: list[list[int]] = []      # our joints on each body's path, root first
        self.q_slots: list[tuple[int, int, int]] = []   # (our joint, idx_q, nq) per copy
        for i in range(model.n_bodies):
            path = model.root_path(int(model.body_joint[i]))
            parent = 0
            for j in path:
                pj = int(oracle.pin_of_ours[j]) + 1
                parent = self.forest.addJoint(parent, src.joints[pj], src.jointPlacements[pj],
                                              f'body{i}_{src.names[pj]}')
                joint = self.forest.joints[parent]
                self.q_slots.append((j, joint.idx_q, joint.nq))
            self.forest.appendBodyToJoint(parent, src.inertias[pj], pin.SE3.Identity())
            self.paths.append(path)
        self.data = self.forest.createData()
        self.v_index = np.concatenate([np.array(p, dtype=np.int64) for p in self.paths])

    def config(self, q: np.ndarray) -> np.ndarray:
        out = np.zeros(self.forest.nq)
        for j, idx, nq in self.q_slots:
            out[idx:idx + nq] = (np.cos(q[j]), np.sin(q[j])) if nq == 2 else q[j]
        return out

    def call(self, qf: np.ndarray, vf: np.ndarray, af: np.ndarray) -> None:
        """The one Pinocchio call per sample (what the benchmarks time)."""
        pin.computeRNEADerivatives(self.forest, self.data, qf, vf, af)

    def tables(self, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray) -> dict[str, np.ndarray]:
        """Our tables (torque, partial, acceleration, velocity, gravity) for one sample."""
        n, B = self.oracle.model.n_joints, self.oracle.model.n_bodies
        vf, af = qd[self.v_index], qdd[self.v_index]
        self.call(self.config(q), vf, af)
        tau = np.array(self.data.tau)
        M = np.triu(self.data.M) + np.triu(self.data.M, 1).T
        dv = np.array(self.data.dtau_dv)
        partial, gravity = np.zeros((n, B)), np.zeros((n, B))
        acceleration, velocity = np.zeros((n, B, n)), np.zeros((n, B, n))
        start = 0
        for i, path in enumerate(self.paths):
            block = slice(start, start + len(path))
            start += len(path)
            Mi, dvi = M[block, block], dv[block, block]
            acc = Mi * qdd[path][None, :]
            vel = 0.5 * dvi * qd[path][None, :]
            partial[path, i] = tau[block]
            acceleration[np.ix_(path, [i], path)] = acc[:, None, :]
            velocity[np.ix_(path, [i], path)] = vel[:, None, :]
            gravity[path, i] = tau[block] - acc.sum(1) - vel.sum(1)
        return {'torque': partial.sum(1), 'partial': partial, 'acceleration': acceleration,
                'velocity': velocity, 'gravity': gravity}
