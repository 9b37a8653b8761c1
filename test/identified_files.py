"""identified.yaml files of known figures, written the way ``plag-ros identify`` writes them
(friction generalized onto the actuated joints), for the tests that need a known arm."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import yaml

from plag_ros.core.dynamics.model import RobotModel
from plag_ros.core.dynamics.regressor import inertial_parameters
from plag_ros.core.identification.fit import joint_friction


def write_identified(path: Path, model: RobotModel, *, armature: np.ndarray | float,
                     stiffness: dict[str, float], **sections) -> str:
    """Write ``model``'s figures, ``armature`` (per actuated joint or one value) and servo
    ``stiffness`` (joint -> K_s) to ``path``; ``sections`` replace whole sections."""
    pi = inertial_parameters(model)
    act = model.actuated_names
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


STIFFNESS_FACTORS = (1.2, 0.8, 1.2, 0.8, 1.2, 0.8, 1.2)
"""K_s of the acceptance arm's servos over the motor table's, per arm joint."""


def acceptance_arm(folder: Path) -> tuple[str, dict[str, float]]:
    """The identification's "true" CRANE-X7, written to ``folder/true_arm.yaml``: four
    links' masses changed by -20 % to +30 % and their COMs moved by up to 9 mm, 0.08
    N*m*s/rad of viscous friction added, Coulomb friction doubled, 0.004 kg*m^2 armature
    per arm joint and every servo's K_s 20 % off the motor table.

    Returns:
        (the file's path, K_s per arm joint).
    """
    from plag_ros.core.dynamics import motors
    from plag_ros.core.dynamics.model import default_urdf_path

    nominal = RobotModel.from_urdf(default_urdf_path())
    mass, com = nominal.body_mass.copy(), nominal.body_com.copy()
    for body, factor, shift in ((1, 1.25, (0.004, 0.0, -0.006)), (2, 0.85, (0.0, 0.005, 0.0)),
                                (3, 1.30, (0.003, -0.004, 0.008)), (5, 0.80, (0.0, 0.0, 0.006))):
        mass[body] *= factor
        com[body] += shift
    arm = dataclasses.replace(nominal, body_mass=mass, body_com=com,
                              damping=nominal.damping + 0.08, friction=2.0 * nominal.friction)
    stiffness = dict(zip(motors.ARM_JOINTS, motors.servo_stiffness(motors.ARM_JOINTS)
                         * STIFFNESS_FACTORS))
    act = nominal.actuated_names
    armature = [0.004 if j in motors.ARM_JOINTS else 0.0 for j in act]
    return write_identified(Path(folder) / 'true_arm.yaml', arm, armature=armature,
                            stiffness=stiffness), stiffness


EFFORT_SCALES = (0.90, 0.92, 1.10, 1.05, 1.08, 0.95, 1.03)
"""The miscalibrated acceptance arm's true torque over the driver's effort converted with the
motor table, per arm joint."""


def miscalibrated_arm(folder: Path) -> tuple[str, dict[str, float], dict[str, float]]:
    """:func:`acceptance_arm` whose driver also misreads effort: each arm joint's true
    torque is :data:`EFFORT_SCALES` times what the motor table makes of the effort, written
    to ``folder/miscalibrated_arm.yaml``.

    Returns:
        (the file's path, K_s per arm joint, effort scale per arm joint).
    """
    from plag_ros.core.dynamics import motors

    truth, stiffness = acceptance_arm(folder)
    content = yaml.safe_load(Path(truth).read_text())
    scales = dict(zip(motors.ARM_JOINTS, EFFORT_SCALES))
    content['effort_scale'] = {'joints': [{'joint': j, 'scale': v} for j, v in scales.items()]}
    path = Path(folder) / 'miscalibrated_arm.yaml'
    path.write_text(yaml.safe_dump(content))
    return str(path), stiffness, scales


KNOWN_PAYLOAD = ('crane_x7_gripper_base_link', 0.5, (0.01, 0.0, 0.07), 0.4 * 0.5 * 0.03 ** 2)
"""The weighed payload of the effort-scale runs: (link, mass [kg], COM (3,) [m] in the
link's frame, principal inertia about it [kg*m^2], a 3 cm sphere's)."""


def with_known_payload(truth: str, path: Path) -> str:
    """``truth``'s identified.yaml with :data:`KNOWN_PAYLOAD` fixed to the gripper, written
    to ``path``: a simulated arm carrying it for the ``--effort-scale`` run."""
    link, mass, com, inertia = KNOWN_PAYLOAD
    content = yaml.safe_load(Path(truth).read_text())
    content['payload'] = {'link': link, 'mass': mass, 'com': list(com),
                          'inertia_about_com': (np.eye(3) * inertia).tolist()}
    Path(path).write_text(yaml.safe_dump(content))
    return str(path)
