"""identified.yaml files of known figures, written the way ``plag-ros identify`` writes them
(friction generalized onto the actuated joints), for the tests that need a known arm."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml

from plag_ros.core.identification import joint_friction
from plag_ros.core.model import RobotModel
from plag_ros.core.regressor import inertial_parameters


def write_identified(path: Path, model: RobotModel, *, armature: np.ndarray | float,
                     stiffness: dict[str, float], **sections) -> str:
    """Write ``model``'s figures, ``armature`` (per actuated joint or one value) and servo
    ``stiffness`` (joint -> K_s) to ``path``; ``sections`` replace whole sections."""
    pi = inertial_parameters(model)
    act = [model.joint_names[j] for j in np.flatnonzero(model.actuated)]
    viscous, coulomb = joint_friction(model)
    armature = np.broadcast_to(np.asarray(armature, dtype=float), (len(act),))
    content = {
        'provenance': {'date': '2026-11-27T00:00:00+00:00'},
        'held_out_rms': {'nominal': [0.3], 'identified': [0.02]},
        'bodies': [{'link': str(model.body_link[i]), 'parameters': pi[i].tolist()}
                   for i in range(model.n_bodies)],
        'joints': [{'joint': j, 'viscous': float(viscous[k]), 'coulomb': float(coulomb[k]),
                    'armature': float(armature[k])} for k, j in enumerate(act)],
        'servo': {'joints': [{'joint': j, 'stiffness': float(v)}
                             for j, v in stiffness.items()]}}
    content.update(sections)
    Path(path).write_text(yaml.safe_dump(content))
    return str(path)
