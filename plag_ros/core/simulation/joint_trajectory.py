"""A joint trajectory as ros2_controllers' JointTrajectoryController samples it.

The controller starts a trajectory from the arm's state at its start time and interpolates
segment by segment (ros2_controllers ``joint_trajectory_controller/trajectory.cpp``,
``interpolate_between_points``): linearly when the points carry positions only, with a cubic
polynomial matching positions and velocities at both ends when they carry velocities too.
After the last point it holds that point. The simulator's trajectory controller
(:mod:`plag_ros.core.simulation.driver`) commands these positions, and ``plag-ros identify
--servo`` rebuilds from a recorded trajectory message the positions the servos were commanded.
"""
from __future__ import annotations

import numpy as np
from scipy.interpolate import CubicHermiteSpline, make_interp_spline

__all__ = ['TrajectoryCommand']


class TrajectoryCommand:
    """Positions commanded along one trajectory message.

    Args:
        start_s: the trajectory's start time [s] (the message's stamp, or its arrival).
        start_q: (J,) the arm's position at the start [rad]; the arm is taken at rest.
        times: (P,) time_from_start of the points [s], increasing, the first >= 0 (a
            first point at 0 replaces the start position at once).
        positions: (P, J) [rad]; velocities: (P, J) [rad/s] or None (linear segments).

    Raises:
        ValueError: shapes that do not match, non-finite values, times not increasing.
    """

    def __init__(self, start_s: float, start_q: np.ndarray, times: np.ndarray,
                 positions: np.ndarray, velocities: np.ndarray | None = None) -> None:
        start_q = np.asarray(start_q, dtype=np.float64)
        times = np.asarray(times, dtype=np.float64)
        positions = np.asarray(positions, dtype=np.float64)
        J = start_q.size
        if (times.ndim != 1 or positions.shape != (times.size, J) or not times.size
                or (velocities is not None and np.shape(velocities) != positions.shape)):
            raise ValueError(f'a trajectory of {J} joints needs (P,) times and (P, {J}) '
                             f'positions (and velocities), got {times.shape}, '
                             f'{positions.shape}')
        if not (times[0] >= 0.0 and np.all(np.diff(times) > 0.0)
                and np.isfinite(positions).all() and np.isfinite(start_q).all()):
            raise ValueError('trajectory points must have finite positions and increasing '
                             'time_from_start from 0')
        lead = 0 if times[0] == 0.0 else 1             # the start state is the first knot
        knots = np.concatenate([[0.0], times])[1 - lead:]
        values = np.concatenate([start_q[None], positions])[1 - lead:]
        if len(knots) == 1:                              # one point at 0: hold it
            knots, values = np.array([0.0, 1.0]), np.repeat(values, 2, axis=0)
            velocities = None
        if velocities is None:
            self._spline = make_interp_spline(knots, values, k=1)
        else:
            slopes = np.concatenate([np.zeros((1, J)), np.asarray(velocities, dtype=float)]
                                    )[1 - lead:]
            if not np.isfinite(slopes).all():
                raise ValueError('trajectory velocities must be finite')
            self._spline = CubicHermiteSpline(knots, values, slopes)
        self.start_s = float(start_s)
        self.end_s = self.start_s + float(times[-1])
        self.first_point_s = self.start_s + float(times[0])
        self._last = positions[-1].copy()
        self._knots_end = float(times[-1])

    def position(self, t_s: float | np.ndarray) -> np.ndarray:
        """Commanded positions at absolute times ``t_s`` [s]: (J,) or (N, J); the start
        position before the start, the last point after the end."""
        t = np.clip(np.asarray(t_s, dtype=np.float64) - self.start_s, 0.0, self._knots_end)
        return self._spline(t)
