"""estimate_offline with velocity_source='position' ignores a measured velocity it is given.

The offline analysis hands the bag's velocities to the estimator whenever the bag has them
(the CRANE-X7 driver publishes them, quantised at 0.024 rad/s). With the default
'position' source they must not be used: qd comes from differentiating q.
"""
from __future__ import annotations

import numpy as np

from plag_ros.core.estimation.filters import EstimatorConfig, estimate_offline


def _sine(n: int = 400, rate_hz: float = 200.0) -> tuple[np.ndarray, np.ndarray]:
    t_ns = (np.arange(n) * (1e9 / rate_hz)).astype(np.int64)
    t = t_ns * 1e-9
    q = np.stack([0.3 * np.sin(2 * np.pi * 0.7 * t), 0.2 * np.cos(2 * np.pi * 1.3 * t)], axis=1)
    return t_ns, q


def test_position_source_ignores_measured_velocity():
    t_ns, q = _sine()
    garbage = np.random.default_rng(7).normal(0.0, 50.0, q.shape)
    config = EstimatorConfig(velocity_source='position')
    plain = estimate_offline(t_ns, q, config)
    given = estimate_offline(t_ns, q, config, qd_measured=garbage)
    np.testing.assert_array_equal(given.qd, plain.qd)
    np.testing.assert_array_equal(given.qdd, plain.qdd)


def test_measured_source_uses_measured_velocity():
    t_ns, q = _sine()
    t = t_ns * 1e-9
    # a measured velocity that is not dq/dt: the estimate must follow it, not q
    measured = np.stack([np.full_like(t, 0.5), np.zeros_like(t)], axis=1)
    est = estimate_offline(t_ns, q, EstimatorConfig(velocity_source='measured'),
                           qd_measured=measured)
    interior = slice(50, -50)   # away from the forward-backward filter's end transients
    np.testing.assert_allclose(est.qd[interior, 0], 0.5, atol=1e-6)
    np.testing.assert_allclose(est.qd[interior, 1], 0.0, atol=1e-6)
