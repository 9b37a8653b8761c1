"""Identified model figures, as ``plag-ros identify`` writes them, applied to a robot model.

``identified.yaml`` holds per body the ten inertial parameters (about its joint frame's
origin, :data:`plag_ros.core.dynamics.regressor` order), per actuated joint viscous and Coulomb
friction and armature, optionally per joint the servo's position-loop stiffness ``K_s``
and the driver's effort calibration (``effort_scale``), and the provenance of the figures
(bags, date, held-out error). Every part of the package that builds a model takes the file
through one setting (``model.parameters`` for the nodes, ``--model`` for the commands) and
:func:`apply_model_parameters` puts its figures into the model:

* the bodies' inertials and the joints' ``damping``/``friction`` are written into the
  model's URDF (so ``urdf_xml`` and the engine agree);
* the effort calibration becomes the model's ``effort_calibration``: every reader of the
  driver's effort, and the simulator's driver, go through
  :func:`plag_ros.core.dynamics.motors.driver_effort_to_torque`;
* armature and ``K_s`` go to the simulator and the impedance controller through
  :meth:`SimulatorConfig.with_model_parameters
  <plag_ros.core.simulation.simulator.SimulatorConfig.with_model_parameters>` and
  :meth:`ImpedanceConfig.with_model_parameters
  <plag_ros.core.control.config.ImpedanceConfig.with_model_parameters>`.
"""
from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from plag_ros.core.common.options import option
from plag_ros.core.dynamics.model import RobotModel, without_xml_declaration
from plag_ros.core.dynamics.regressor import body_figures, inertial_parameters

__all__ = ['PAYLOAD_LINK', 'ModelParameters', 'ModelSettings', 'apply_model_parameters',
           'load_model_parameters', 'model_with_parameters', 'payload_in_link_frame',
           'urdf_with_figures']


@dataclass(frozen=True)
class ModelParameters:
    """The figures of an ``identified.yaml``.

    Attributes:
        path: where they were read.
        inertial: link name -> (10,) body parameters.
        viscous [N*m*s/rad], coulomb [N*m], armature [kg*m^2]: joint name -> value.
        servo_stiffness: joint name -> K_s [N*m/rad] (empty without ``--servo``).
        effort_scale: joint name -> factor on the driver's effort-to-torque conversion
            (empty without ``--effort-scale``).
        provenance: the file's ``provenance`` and ``held_out_rms`` sections, as written.
        payload: (link, mass [kg], COM (3,) [m] and inertia about it (3, 3) [kg*m^2], both
            in the link's frame) of a payload fixed to ``link``, or None.
    """

    path: str
    inertial: dict[str, np.ndarray]
    viscous: dict[str, float]
    coulomb: dict[str, float]
    armature: dict[str, float]
    servo_stiffness: dict[str, float]
    provenance: dict[str, Any]
    payload: tuple[str, float, np.ndarray, np.ndarray] | None = None
    effort_scale: dict[str, float] = dataclasses.field(default_factory=dict)

    def per_joint(self, kind: str, joints: list[str] | tuple[str, ...],
                  default: np.ndarray) -> np.ndarray:
        """(len(joints),) values of ``kind`` ('armature', 'servo_stiffness', ...) in
        ``joints`` order; ``default`` where the file has none."""
        table: dict[str, float] = getattr(self, kind)
        return np.array([table.get(j, d) for j, d in zip(joints, default)], dtype=np.float64)

    def summary(self) -> str:
        """One line for a node's start-up log."""
        held = self.provenance.get('held_out_rms') or {}
        identified = [v for v in held.get('identified') or [] if v is not None]
        nominal = [v for v in held.get('nominal') or [] if v is not None]
        error = ''
        if identified and nominal:          # None: a joint that did not move there
            error = (f', held-out torque RMS {max(identified):.3g} N*m '
                     f'(nominal {max(nominal):.3g})')
        date = (self.provenance.get('provenance') or {}).get('date', '?')
        payload = '' if self.payload is None else (
            f', a {self.payload[1]:.3f} kg payload on {self.payload[0]}')
        scale = '' if not self.effort_scale else (
            f', effort scale of {len(self.effort_scale)} joints '
            f'({min(self.effort_scale.values()):.3g}..{max(self.effort_scale.values()):.3g})')
        return (f'model parameters {self.path}: {len(self.inertial)} bodies, '
                f'{len(self.viscous)} joints, K_s of {len(self.servo_stiffness)} joints'
                f'{scale}{payload}, identified {date}{error}')


def _table(entries: Any, key: str, value: str, path: str) -> dict[str, float]:
    out = {}
    for entry in entries or []:
        if not isinstance(entry, dict) or key not in entry or value not in entry:
            raise ValueError(f'{path}: an entry of the {key}s lacks {key!r} or {value!r}')
        number = float(entry[value])
        if not np.isfinite(number):
            raise ValueError(f'{path}: {entry[key]} has a non-finite {value}')
        out[str(entry[key])] = number
    return out


def load_model_parameters(path: str | Path) -> ModelParameters:
    """Read an ``identified.yaml``.

    Raises:
        ValueError: not such a file (missing sections, wrong shapes, non-finite or
            negative figures); OSError: unreadable.
    """
    path = str(path)
    data = yaml.safe_load(Path(path).read_text())
    if not isinstance(data, dict) or 'bodies' not in data or 'joints' not in data:
        raise ValueError(f'{path}: not an identified.yaml of plag-ros identify (it needs '
                         "'bodies' and 'joints')")
    inertial = {}
    for body in data['bodies'] or []:
        pi = np.asarray(body.get('parameters', []), dtype=np.float64) \
            if isinstance(body, dict) else np.zeros(0)
        if pi.shape != (10,) or not np.isfinite(pi).all() or 'link' not in body:
            raise ValueError(f'{path}: every body needs a link and 10 finite parameters')
        inertial[str(body['link'])] = pi
    joints = data['joints']
    viscous = _table(joints, 'joint', 'viscous', path)
    coulomb = _table(joints, 'joint', 'coulomb', path)
    armature = _table(joints, 'joint', 'armature', path)
    servo = (data.get('servo') or {}).get('joints') or []
    stiffness = _table(servo, 'joint', 'stiffness', path)
    scale = _table((data.get('effort_scale') or {}).get('joints') or [], 'joint', 'scale',
                   path)
    for name, table in (('viscous', viscous), ('coulomb', coulomb), ('armature', armature)):
        if any(v < 0.0 for v in table.values()):
            raise ValueError(f'{path}: negative {name} friction or armature')
    if any(v <= 0.0 for v in stiffness.values()):
        raise ValueError(f'{path}: servo stiffness must be positive')
    if any(v <= 0.0 for v in scale.values()):
        raise ValueError(f'{path}: an effort scale must be positive')
    provenance = {k: data[k] for k in ('provenance', 'held_out_rms') if k in data}
    payload = None
    if data.get('payload'):
        section = data['payload']
        try:
            payload = (str(section['link']), float(section['mass']),
                       np.asarray(section['com'], dtype=np.float64).reshape(3),
                       np.asarray(section['inertia_about_com'], dtype=np.float64).reshape(3, 3))
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f'{path}: the payload needs link, mass, com and '
                             f'inertia_about_com: {err}') from err
        if not (payload[1] > 0 and np.isfinite(payload[2]).all()
                and np.isfinite(payload[3]).all()):
            raise ValueError(f'{path}: the payload needs a positive mass and finite figures')
    return ModelParameters(path, inertial, viscous, coulomb, armature, stiffness, provenance,
                           payload, scale)


def urdf_with_figures(model: RobotModel, inertial: dict[str, np.ndarray],
                      viscous: dict[str, float], coulomb: dict[str, float],
                      payload: tuple[str, float, np.ndarray, np.ndarray] | None = None
                      ) -> str:
    """The model's URDF with new body figures and joint friction.

    A body's figures go on its link (its joint's child); links lumped into it by fixed
    joints lose theirs, so the dynamics are those of the figures. Joints not named keep
    their ``dynamics`` element; a mimic joint of a named joint gets none, because the
    figures are generalized (:func:`~plag_ros.core.identification.fit.joint_friction`): its
    friction is already in the joint it follows.

    Args:
        inertial: link name -> (10,) parameters (a moving body's child link).
        viscous, coulomb: actuated joint name -> generalized damping [N*m*s/rad] and
            friction [N*m].
        payload: (link, mass, COM, inertia about the COM) in the link's frame: added as a
            link ``plag_payload`` fixed to ``link`` (the model lumps it into that body).
    """
    root = ET.fromstring(without_xml_declaration(model.urdf_xml))
    owner = {model.link_names[k]: int(model.link_joint[k]) for k in range(len(model.link_names))}
    body_of = {str(model.body_link[i]): i for i in range(model.n_bodies)}
    moved = {int(model.body_joint[body_of[name]]) for name in inertial}
    for link in root.iter('link'):
        name = link.get('name') or ''
        if name not in inertial and owner.get(name, -2) not in moved:
            continue
        for old in link.findall('inertial'):
            link.remove(old)       # moving links of a new body: its figures hold them
        if name not in inertial:
            continue
        m, c, inertia = body_figures(inertial[name])
        _inertial(link, m, c, inertia)
    named = set(viscous) | set(coulomb)
    for joint in root.iter('joint'):
        name = joint.get('name') or ''
        follows = joint.find('mimic')
        if follows is not None and follows.get('joint') in named:
            for element in joint.findall('dynamics'):
                joint.remove(element)
            continue
        if name in viscous or name in coulomb:
            now = joint.find('dynamics')
            damping = viscous.get(name, float(now.get('damping', 0.0)) if now is not None else 0.0)
            friction = coulomb.get(name, float(now.get('friction', 0.0)) if now is not None
                                   else 0.0)
            for element in joint.findall('dynamics'):
                joint.remove(element)
            ET.SubElement(joint, 'dynamics', damping=f'{float(damping):.12g}',
                          friction=f'{float(friction):.12g}')
    if payload is not None:
        _add_payload(root, *payload)
    return '<?xml version="1.0"?>\n' + ET.tostring(root, encoding='unicode') + '\n'


PAYLOAD_LINK = 'plag_payload'
"""The URDF link a payload becomes (fixed to the link it is on)."""


def _add_payload(root: ET.Element, link: str, mass: float, com: np.ndarray,
                 inertia: np.ndarray) -> None:
    if not any(element.get('name') == link for element in root.iter('link')):
        raise ValueError(f'payload link {link!r} is not a link of the URDF')
    body = ET.SubElement(root, 'link', name=PAYLOAD_LINK)
    _inertial(body, mass, com, inertia)
    joint = ET.SubElement(root, 'joint', name=f'{PAYLOAD_LINK}_joint', type='fixed')
    ET.SubElement(joint, 'parent', link=link)
    ET.SubElement(joint, 'child', link=PAYLOAD_LINK)
    ET.SubElement(joint, 'origin', xyz='0 0 0', rpy='0 0 0')


def _inertial(link: ET.Element, mass: float, com: np.ndarray, inertia: np.ndarray) -> None:
    element = ET.SubElement(link, 'inertial')
    ET.SubElement(element, 'origin', xyz=' '.join(f'{v:.12g}' for v in com), rpy='0 0 0')
    ET.SubElement(element, 'mass', value=f'{mass:.12g}')
    ET.SubElement(element, 'inertia', ixx=f'{inertia[0, 0]:.12g}',
                  ixy=f'{inertia[0, 1]:.12g}', ixz=f'{inertia[0, 2]:.12g}',
                  iyy=f'{inertia[1, 1]:.12g}', iyz=f'{inertia[1, 2]:.12g}',
                  izz=f'{inertia[2, 2]:.12g}')


def payload_in_link_frame(model: RobotModel, body: int, pi: np.ndarray | None = None
                          ) -> tuple[str, float, np.ndarray, np.ndarray]:
    """(link, mass, COM, inertia about the COM) of ``model``'s body ``body`` (or of the
    parameters ``pi`` (10,) for it) in the frame of the link it is attached to
    (:meth:`RobotModel.with_payload`'s figures)."""
    pi = inertial_parameters(model)[body] if pi is None else pi
    mass, com, inertia = body_figures(pi)            # in its joint's child frame
    link = str(model.body_link[body])
    T = model.T_joint_link[model.link_index(link)]
    R, p = T[:3, :3], T[:3, 3]
    return link, float(mass), R.T @ (com - p), R.T @ inertia @ R


def apply_model_parameters(model: RobotModel, parameters: ModelParameters) -> RobotModel:
    """``model`` with the file's body figures, joint friction and effort calibration
    (armature and ``K_s`` are not model figures: :meth:`ModelParameters.per_joint` gives
    them).

    Raises:
        ValueError: the file names links or joints the model does not have (it was
            identified on another robot).
    """
    bodies = {str(link) for link in model.body_link}
    unknown = sorted(set(parameters.inertial) - bodies) + sorted(
        (set(parameters.viscous) | set(parameters.coulomb) | set(parameters.armature)
         | set(parameters.servo_stiffness) | set(parameters.effort_scale))
        - set(model.joint_names))
    if unknown:
        raise ValueError(f'{parameters.path}: {unknown} are not bodies or joints of '
                         f'{model.name}: the file was identified on another robot')
    xml = urdf_with_figures(model, parameters.inertial, parameters.viscous,
                            parameters.coulomb, parameters.payload)
    out = RobotModel.from_urdf(xml, gravity=tuple(model.gravity))
    if not parameters.effort_scale:
        return out
    calibration = parameters.per_joint('effort_scale', out.joint_names, np.ones(out.n_joints))
    return dataclasses.replace(out, effort_calibration=calibration)


@dataclass(frozen=True)
class ModelSettings:
    """``model.*``: where a node's model figures come from beyond its URDF."""

    parameters: str = option(
        '', 'identified.yaml of plag-ros identify: its body figures, joint friction, '
        'armature, servo K_s and effort scale replace the URDF and motor-table figures; '
        'empty: none',
        read_only=True)

    def __post_init__(self) -> None:
        if self.parameters and not Path(self.parameters).is_file():
            raise ValueError(f'model.parameters {self.parameters!r} is not a file')


def model_with_parameters(model: RobotModel, path: str | Path | None
                          ) -> tuple[RobotModel, ModelParameters | None]:
    """``model`` with the figures of ``path`` applied (unchanged when ``path`` is empty).

    Raises:
        ValueError: see :func:`load_model_parameters` and :func:`apply_model_parameters`.
    """
    if not path:
        return model, None
    parameters = load_model_parameters(path)
    return apply_model_parameters(model, parameters), parameters
