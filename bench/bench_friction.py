"""Cost of the friction report on the dynamics node's hot path, per sample.

Per accepted joint state the node reads the message's effort
(``JointStateReader.optional_effort``) and applies the rest rule
(``plag_ros.core.estimation.friction.RestFriction.apply``) to the decomposition it just computed.
This bench times both on one CRANE-X7 sample, with every joint at rest (the stick branch) and every
joint moving, against the decomposition itself (``decompose_arrays`` into reused buffers) in the
same process, and the rule on a 10 000-sample batch (what ``plag-ros analyze`` applies) against the
batch decomposition.

Run: ``PYTHONPATH=$PWD python bench/bench_friction.py`` (about ten seconds).
"""
from __future__ import annotations

import numpy as np
import torch
from timing import median_time_s

from plag_ros.core.dynamics.engine import PartialLagrangian
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
from plag_ros.core.estimation.filters import EstimatorConfig
from plag_ros.core.estimation.friction import RestFriction
from plag_ros.ros import messages as msgs


def main() -> None:
    model = RobotModel.from_urdf(default_urdf_path())
    n = model.n_joints
    rule = RestFriction(model, EstimatorConfig())
    engine = PartialLagrangian(model, dtype=torch.float64)
    tables = engine.empty_arrays()
    names = [name for k, name in enumerate(model.joint_names) if model.mimic_source[k] < 0]
    msg = msgs.joint_state(names, np.zeros(len(names)), effort=np.full(len(names), 0.1),
                           t_ns=1)
    reader = msgs.JointStateReader(model)
    reader.read(msg)
    zero = np.zeros(n)
    rule.apply(np.zeros(n), zero, zero, zero)          # load the compiled rule
    engine.decompose_arrays(zero, zero, zero, out=tables)
    print(f'one sample, median of 20 000 calls (rest band {rule.band[0]:.4f} rad/s):')
    for label, speed in (('every joint at rest', 0.01), ('every joint moving', 0.5)):
        qd = np.full(n, speed)
        friction = np.zeros(n)
        peer = median_time_s(lambda qd=qd: engine.decompose_arrays(zero, qd, zero, out=tables),
                             20_000)
        with_effort = median_time_s(
            lambda qd=qd, f=friction: rule.apply(f, qd, zero, reader.optional_effort(msg)),
            20_000)
        without = median_time_s(lambda qd=qd, f=friction: rule.apply(f, qd, zero, None),
                                20_000)
        print(f'  {label:<20} effort read + rule {with_effort * 1e6:5.1f} us '
              f'({with_effort / peer:.2f}x the decomposition), rule without effort '
              f'{without * 1e6:5.1f} us; decompose_arrays (peer) {peer * 1e6:5.1f} us')
    rng = np.random.default_rng(0)
    batch = 10_000
    q = rng.uniform(-1.0, 1.0, (batch, n))
    qd = rng.normal(0.0, 0.1, (batch, n))       # about a third inside the band
    effort = rng.normal(0.0, 0.3, (batch, n))
    out = engine.decompose_arrays(q, qd, zero.reshape(1, n).repeat(batch, 0))
    peer = median_time_s(lambda: engine.decompose_arrays(q, qd, np.zeros((batch, n))), 5)
    applied = median_time_s(lambda: rule.apply(out['friction'].copy(), qd, out['torque'],
                                               effort), 20)
    print(f'batch of {batch}: rule {applied * 1e3:.2f} ms ({applied / batch * 1e9:.0f} ns/sample, '
          f'{applied / peer:.3f}x the batch decomposition, {peer * 1e3:.1f} ms)')


if __name__ == '__main__':
    main()
