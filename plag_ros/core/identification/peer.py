"""The peer every identification report is compared with: ordinary least squares on
Pinocchio's joint-torque regressor.

The textbook identification (Gautier and Khalil's linear least squares on the inverse
dynamics model) with the regressor of an independent library: Pinocchio's
``computeJointTorqueRegressor`` (Carpentier et al., "The Pinocchio C++ library", IEEE/SICE
SII 2019, doi:10.1109/SII.2019.8700380) on the same URDF, each mimic joint's row folded
onto the joint it follows as the motor carries it, plus the same per-joint friction and
offset columns as :func:`plag_ros.core.identification.fit.parameter_rows`. No prior, no
consistency: the minimum-norm least-squares solution on the rows where a joint moves. It
fits the data it sees at least as well as any constrained fit and tells how much a
regularised, physically consistent fit gives up there and gains on held-out data.

Pinocchio (the ``pin`` wheel) is imported when a peer is built: ``ImportError`` says how
to install it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from plag_ros.core.dynamics.model import RobotModel, actuation_matrix
from plag_ros.core.identification.fit import MeasurementTerms, measured_moving, parameter_rows

__all__ = ['LeastSquaresPeer', 'fit_peer', 'pinocchio_regressor']


def _pinocchio():
    try:
        import pinocchio
    except ImportError as err:          # a test dependency, optional for the command
        raise ImportError('the least-squares peer needs Pinocchio: pip install pin') from err
    return pinocchio


def pinocchio_regressor(model: RobotModel, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray
                        ) -> np.ndarray:
    """(N, m, 10 J) Pinocchio's joint-torque regressor of the actuated joints, in the
    model's actuated order (mimic rows folded), at (N, n) states in the model's order.

    The model's URDF text (``model.urdf_xml``) is what Pinocchio reads: the same file, parsed
    by another library. Gravity is the model's.
    """
    pin = _pinocchio()
    robot = pin.buildModelFromXML(model.urdf_xml)
    robot.gravity.linear = np.asarray(model.gravity, dtype=np.float64)
    data = robot.createData()
    ours = model.joint_index([robot.names[j] for j in range(1, robot.njoints)])
    joints = [robot.joints[j] for j in range(1, robot.njoints)]
    q, qd, qdd = (np.atleast_2d(np.asarray(x, dtype=np.float64)) for x in (q, qd, qdd))
    N, n = q.shape
    Y = np.empty((N, n, 10 * (robot.njoints - 1)))
    config = np.zeros(robot.nq)
    for k in range(N):
        for joint, i in zip(joints, ours):
            if joint.nq == 2:                   # continuous: (cos, sin)
                config[joint.idx_q:joint.idx_q + 2] = np.cos(q[k, i]), np.sin(q[k, i])
            else:
                config[joint.idx_q] = q[k, i]
        v = np.empty(robot.nv)
        a = np.empty(robot.nv)
        for joint, i in zip(joints, ours):
            v[joint.idx_v], a[joint.idx_v] = qd[k, i], qdd[k, i]
        rows = pin.computeJointTorqueRegressor(robot, data, config, v, a)
        for joint, i in zip(joints, ours):
            Y[k, i] = rows[joint.idx_v]
    G, _ = actuation_matrix(model)
    return np.einsum('ja,njp->nap', G, Y)


@dataclass(frozen=True)
class LeastSquaresPeer:
    """An ordinary least-squares fit (module docstring).

    Attributes:
        coefficients: (p,) the minimum-norm solution; rank: of the rows fitted;
        rows: (sample, joint) rows fitted; terms: the per-joint columns.
    """

    coefficients: np.ndarray
    rank: int
    rows: int
    terms: MeasurementTerms

    def predict(self, model: RobotModel, q, qd, qdd) -> np.ndarray:
        """(N, m) actuated torque of the fit at (N, n) states."""
        return _rows(model, q, qd, qdd, self.terms) @ self.coefficients


def _rows(model: RobotModel, q, qd, qdd, terms: MeasurementTerms) -> np.ndarray:
    inertial = 10 * model.n_bodies
    joint = parameter_rows(model, q, qd, qdd, terms)[..., inertial:]
    return np.concatenate([pinocchio_regressor(model, q, qd, qdd), joint], axis=-1)


def fit_peer(model: RobotModel, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray,
             torque: np.ndarray, *, rest_band: np.ndarray | float,
             terms: MeasurementTerms | None = None) -> LeastSquaresPeer:
    """Fit the peer to (N, n) states and (N, m) measured actuated torque [N*m] on the rows
    where a joint moves outside ``rest_band`` (scalar, (n,) or (N, n) [rad/s]) and the torque is
    finite, as :func:`~plag_ros.core.identification.fit.identify` chooses them."""
    terms = terms or MeasurementTerms()
    torque = np.asarray(torque, dtype=np.float64)
    use = measured_moving(model, qd, torque, rest_band)
    Phi = _rows(model, q, qd, qdd, terms)[use]
    coefficients, _, rank, _ = np.linalg.lstsq(Phi, torque[use], rcond=None)
    return LeastSquaresPeer(coefficients=coefficients, rank=int(rank), rows=int(use.sum()),
                            terms=terms)
