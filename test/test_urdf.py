"""Check the bundled CRANE-X7 URDF against the CRANE-X7 parameter table, figure by figure.

The URDF (urdf/crane_x7.urdf) is written by hand from the parameter table, kept in the
repository as test/data/crane_x7_params.yaml (its header names the upstream source of every
figure); every joint and link figure there must appear in the
URDF unchanged. The numbers are literals re-typed from the table, so they are compared with
exact float equality. Pinocchio then serves as an independent reader of the same file: joint
count, moving mass and the joint positions at q = 0.
"""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pinocchio as pin
import pytest
import yaml
from urdf_parser_py.urdf import URDF, Box, Cylinder, Sphere

REPO_ROOT = Path(__file__).resolve().parents[1]
URDF_PATH = REPO_ROOT / 'urdf' / 'crane_x7.urdf'
PARAMS_PATH = Path(__file__).resolve().parent / 'data' / 'crane_x7_params.yaml'

MOVING_TYPES = ('revolute', 'continuous', 'prismatic')
INERTIA_KEYS = ('ixx', 'ixy', 'ixz', 'iyy', 'iyz', 'izz')
ZERO_POSE = {'xyz': [0.0, 0.0, 0.0], 'rpy': [0.0, 0.0, 0.0]}


@pytest.fixture(scope='module')
def params() -> dict[str, Any]:
    """The CRANE-X7 parameter table (part of the repository: a missing file is an error)."""
    with PARAMS_PATH.open(encoding='utf-8') as stream:
        return yaml.safe_load(stream)


@pytest.fixture(scope='module')
def urdf_text() -> str:
    return URDF_PATH.read_text(encoding='utf-8')


@pytest.fixture(scope='module')
def robot(urdf_text: str) -> URDF:
    return URDF.from_xml_string(urdf_text)


@pytest.fixture(scope='module')
def pin_model() -> pin.Model:
    # Default parsing (mimic=False): the mimic finger is an ordinary joint, so nq = 9 as in
    # the partial Lagrangian model (n = 9 coordinates, fill_mimic fills finger_b).
    return pin.buildModelFromUrdf(str(URDF_PATH))


def _floats(values: Any) -> list[float]:
    """Floats of a yaml or urdf_parser_py sequence (PyYAML reads '1e-06' without a dot as str)."""
    return [float(v) for v in values]


def _pose(origin: Any) -> dict[str, list[float]]:
    """xyz/rpy of a urdf_parser_py Pose; an absent <origin> is the identity (URDF default)."""
    if origin is None:
        return {'xyz': [0.0, 0.0, 0.0], 'rpy': [0.0, 0.0, 0.0]}
    return {'xyz': _floats(origin.xyz), 'rpy': _floats(origin.rpy)}


def _joint_mismatches(spec: dict[str, Any], joint: Any) -> list[str]:
    """Every difference between one yaml joint entry and the parsed URDF joint."""
    name = spec['name']
    bad: list[str] = []

    def check(field: str, got: Any, want: Any) -> None:
        if got != want:
            bad.append(f'joint {name!r} {field}: urdf {got!r} != table {want!r}')

    check('type', joint.type, spec['type'])
    check('parent', joint.parent, spec['parent'])
    check('child', joint.child, spec['child'])
    want_origin = spec.get('origin', ZERO_POSE)
    got_origin = _pose(joint.origin)
    check('origin.xyz', got_origin['xyz'], _floats(want_origin['xyz']))
    check('origin.rpy', got_origin['rpy'], _floats(want_origin['rpy']))

    if 'axis' in spec:
        check('axis', None if joint.axis is None else _floats(joint.axis), _floats(spec['axis']))
    elif joint.type in MOVING_TYPES:
        bad.append(f'joint {name!r}: moving joint without an axis in the table')

    if 'limit' in spec:
        if joint.limit is None:
            bad.append(f'joint {name!r}: no <limit>')
        else:
            for key in ('lower', 'upper', 'effort', 'velocity'):
                check(f'limit.{key}', getattr(joint.limit, key), float(spec['limit'][key]))
    else:
        check('limit', joint.limit, None)

    if 'dynamics' in spec:
        if joint.dynamics is None:
            bad.append(f'joint {name!r}: no <dynamics>')
        else:
            for key in ('damping', 'friction'):
                check(
                    f'dynamics.{key}', getattr(joint.dynamics, key), float(spec['dynamics'][key])
                )
    else:
        check('dynamics', joint.dynamics, None)

    if 'mimic' in spec:
        if joint.mimic is None:
            bad.append(f'joint {name!r}: no <mimic>')
        else:
            check('mimic.joint', joint.mimic.joint, spec['mimic']['joint'])
            # urdf_parser_py leaves an absent attribute as None; URDF defaults are 1 and 0.
            multiplier = 1.0 if joint.mimic.multiplier is None else joint.mimic.multiplier
            offset = 0.0 if joint.mimic.offset is None else joint.mimic.offset
            check('mimic.multiplier', multiplier, float(spec['mimic']['multiplier']))
            check('mimic.offset', offset, float(spec['mimic']['offset']))
    else:
        check('mimic', joint.mimic, None)
    return bad


def _link_mismatches(spec: dict[str, Any], link: Any) -> list[str]:
    """Every difference between one yaml link entry and the parsed URDF link's inertial."""
    name = spec['name']
    if spec.get('mass') is None:
        if link.inertial is not None:
            return [f'link {name!r}: massless in the table but has an <inertial>']
        return []
    inertial = link.inertial
    if inertial is None or inertial.inertia is None:
        return [f'link {name!r}: no <inertial>/<inertia> (table mass {spec["mass"]})']
    bad: list[str] = []

    def check(field: str, got: Any, want: Any) -> None:
        if got != want:
            bad.append(f'link {name!r} {field}: urdf {got!r} != table {want!r}')

    check('mass', inertial.mass, float(spec['mass']))
    got_com = _pose(inertial.origin)
    check('com.xyz', got_com['xyz'], _floats(spec['com']['xyz']))
    # rpy is kept as written (1.570795, from M_PI = 3.14159 in the source), not pi/2.
    check('com.rpy', got_com['rpy'], _floats(spec['com']['rpy']))
    for key in INERTIA_KEYS:
        check(f'inertia.{key}', getattr(inertial.inertia, key), float(spec['inertia'][key]))
    return bad


def _radians_range(expression: str) -> tuple[float, float]:
    """(lower, upper) [rad] of a table expression like 'radians(-157) .. radians(157)'."""
    degrees = re.findall(r'radians\(([-+0-9.eE]+)\)', expression)
    assert len(degrees) == 2, f'cannot read limit expression {expression!r}'
    return math.radians(float(degrees[0])), math.radians(float(degrees[1]))


def _fixed_to_root_links(params: dict[str, Any]) -> set[str]:
    """Links joined to the root link through fixed joints only (they never move)."""
    fixed_children: dict[str, list[str]] = {}
    for spec in params['joints']:
        if spec['type'] == 'fixed':
            fixed_children.setdefault(spec['parent'], []).append(spec['child'])
    found = {params['root_link']}
    stack = [params['root_link']]
    while stack:
        for child in fixed_children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def _moving_joint_names(params: dict[str, Any]) -> list[str]:
    return [spec['name'] for spec in params['joints'] if spec['type'] in MOVING_TYPES]


# --------------------------------------------------------------------------------------------
# URDF text and structure
# --------------------------------------------------------------------------------------------


def test_robot_name_and_root(params: dict[str, Any], robot: URDF) -> None:
    assert robot.name == params['robot_name'] == 'crane_x7'
    assert robot.get_root() == params['root_link']


def test_header_comment_names_source(params: dict[str, Any], urdf_text: str) -> None:
    header = urdf_text.split('<robot', 1)[0]
    assert '<!--' in header, 'URDF must open with a comment naming its source'
    assert params['source']['repository'] in header
    assert params['source']['commit'] in header
    assert 'crane_x7_params.yaml' in header
    assert 'primitive' in header


def test_joint_names_match_table(params: dict[str, Any], robot: URDF) -> None:
    urdf_names = [joint.name for joint in robot.joints]
    table_names = [spec['name'] for spec in params['joints']]
    assert len(urdf_names) == len(set(urdf_names)), 'duplicate joint names in the URDF'
    assert sorted(urdf_names) == sorted(table_names)


def test_joint_figures_match_table(params: dict[str, Any], robot: URDF) -> None:
    joints = {joint.name: joint for joint in robot.joints}
    bad: list[str] = []
    for spec in params['joints']:
        if spec['name'] not in joints:
            bad.append(f'joint {spec["name"]!r} missing from the URDF')
            continue
        bad += _joint_mismatches(spec, joints[spec['name']])
    assert not bad, '\n'.join(bad)


def test_mimic_finger_follows_finger_a(params: dict[str, Any], robot: URDF) -> None:
    mimics = {joint.name: joint.mimic for joint in robot.joints if joint.mimic is not None}
    assert set(mimics) == {params['gripper']['mimic_joint']}
    mimic = mimics[params['gripper']['mimic_joint']]
    assert mimic.joint == params['gripper']['actuated_joint']
    assert (mimic.multiplier, mimic.offset) == (1.0, 0.0)


def test_limits_equal_their_source_expressions(params: dict[str, Any]) -> None:
    """The table's radian limits are radians(degrees) of the source, exactly."""
    for spec in params['joints']:
        if 'limit_source_expression' in spec:
            lower, upper = _radians_range(spec['limit_source_expression'])
            assert (spec['limit']['lower'], spec['limit']['upper']) == (lower, upper), spec['name']


def test_link_names_match_table(params: dict[str, Any], robot: URDF) -> None:
    urdf_names = [link.name for link in robot.links]
    table_names = [spec['name'] for spec in params['links']]
    assert len(urdf_names) == len(set(urdf_names)), 'duplicate link names in the URDF'
    assert sorted(urdf_names) == sorted(table_names)


def test_link_inertials_match_table(params: dict[str, Any], robot: URDF) -> None:
    links = {link.name: link for link in robot.links}
    bad: list[str] = []
    for spec in params['links']:
        if spec['name'] not in links:
            bad.append(f'link {spec["name"]!r} missing from the URDF')
            continue
        bad += _link_mismatches(spec, links[spec['name']])
    assert not bad, '\n'.join(bad)


def test_table_mass_totals_are_consistent(params: dict[str, Any]) -> None:
    masses = {
        spec['name']: float(spec['mass'])
        for spec in params['links']
        if spec.get('mass') is not None
    }
    fixed = _fixed_to_root_links(params)
    assert sum(masses.values()) == pytest.approx(
        params['derived']['total_mass_all_links'], rel=0.0, abs=1e-12
    )
    assert sum(m for name, m in masses.items() if name not in fixed) == pytest.approx(
        params['derived']['moving_mass_excluding_shoulder_fixed_part'], rel=0.0, abs=1e-12
    )


def test_geometry_is_primitive_with_defined_materials(robot: URDF) -> None:
    defined = {material.name for material in robot.materials if material.color is not None}
    assert len(defined) >= 2, 'expected a couple of named materials with colours'
    bad: list[str] = []
    for link in robot.links:
        if link.inertial is not None and (not link.visuals or not link.collisions):
            bad.append(f'link {link.name!r}: has mass but no visual or no collision')
        for kind, elements in (('visual', link.visuals), ('collision', link.collisions)):
            for element in elements:
                geometry = element.geometry
                if isinstance(geometry, Box):
                    sizes = _floats(geometry.size)
                elif isinstance(geometry, Cylinder):
                    sizes = [geometry.radius, geometry.length]
                elif isinstance(geometry, Sphere):
                    sizes = [geometry.radius]
                else:
                    bad.append(f'link {link.name!r} {kind}: not a primitive ({geometry!r})')
                    continue
                if not all(0.0 < s < 0.5 for s in sizes):
                    bad.append(f'link {link.name!r} {kind}: implausible size {sizes}')
        for visual in link.visuals:
            if visual.material is None or visual.material.name not in defined:
                bad.append(f'link {link.name!r}: visual material not one of {sorted(defined)}')
    assert not bad, '\n'.join(bad)


# --------------------------------------------------------------------------------------------
# Pinocchio as an independent reader
# --------------------------------------------------------------------------------------------


def test_pinocchio_joints(params: dict[str, Any], pin_model: pin.Model) -> None:
    moving = _moving_joint_names(params)
    assert len(moving) == 9
    assert pin_model.nq == 9 and pin_model.nv == 9
    assert pin_model.njoints == 10  # universe + 9
    names = list(pin_model.names)[1:]
    assert sorted(names) == sorted(moving)
    # The arm is a serial chain: each arm joint hangs off the previous one.
    chain = params['arm_joints_in_chain_order']
    for parent_name, child_name in itertools.pairwise(chain):
        child_id = pin_model.getJointId(child_name)
        assert pin_model.names[pin_model.parents[child_id]] == parent_name
    assert pin_model.parents[pin_model.getJointId(chain[0])] == 0
    # Both fingers branch from the wrist joint (joint 7).
    for finger in (params['gripper']['actuated_joint'], params['gripper']['mimic_joint']):
        assert pin_model.names[pin_model.parents[pin_model.getJointId(finger)]] == chain[-1]


def test_pinocchio_moving_mass(params: dict[str, Any], pin_model: pin.Model) -> None:
    # Pinocchio turns fixed joints into frames and appends the child link's inertia to the body
    # of its parent joint. crane_x7_shoulder_fixed_part_link reaches the world through fixed
    # joints only (base_link_to_world_joint, mounting plate, mount joint), so its 0.388 kg is
    # merged into the universe (joint 0, inertias[0]) and is no moving body; the other massive
    # links are each the child of a moving joint (their fixed children are massless).
    fixed = _fixed_to_root_links(params)
    masses = {
        spec['name']: float(spec['mass'])
        for spec in params['links']
        if spec.get('mass') is not None
    }
    fixed_mass = sum(m for name, m in masses.items() if name in fixed)
    moving_mass = sum(m for name, m in masses.items() if name not in fixed)
    assert fixed & set(masses) == {'crane_x7_shoulder_fixed_part_link'}

    pin_moving_mass = sum(pin_model.inertias[j].mass for j in range(1, pin_model.njoints))
    assert pin_moving_mass == pytest.approx(moving_mass, rel=0.0, abs=1e-12)
    assert pin_model.inertias[0].mass == pytest.approx(fixed_mass, rel=0.0, abs=1e-12)
    # Body by body: each moving joint carries exactly its child link's mass.
    joints = {spec['name']: spec for spec in params['joints']}
    for name in _moving_joint_names(params):
        child = joints[name]['child']
        assert pin_model.inertias[pin_model.getJointId(name)].mass == masses[child], name


def test_pinocchio_body_inertia_in_link_frame(
    params: dict[str, Any], pin_model: pin.Model
) -> None:
    # Pinocchio rotates the URDF inertia by com.rpy into the link frame; for links with
    # com.rpy = [1.570795, 0, 0] the table's DERIVED inertia_in_link_frame (R I R^T, printed
    # to 6 significant digits) must agree. This checks we kept the source's rotated-frame
    # semantics rather than pasting the derived tensor.
    joints = {spec['name']: spec for spec in params['joints']}
    links = {spec['name']: spec for spec in params['links']}
    for name in _moving_joint_names(params):
        spec = links[joints[name]['child']]
        inertia = pin_model.inertias[pin_model.getJointId(name)]
        np.testing.assert_allclose(
            inertia.lever, _floats(spec['com']['xyz']), rtol=0.0, atol=1e-15, err_msg=name
        )
        want = spec.get('inertia_in_link_frame', spec['inertia'])
        got = inertia.inertia
        got_entries = [got[0, 0], got[0, 1], got[0, 2], got[1, 1], got[1, 2], got[2, 2]]
        np.testing.assert_allclose(
            got_entries,
            [float(want[k]) for k in INERTIA_KEYS],
            rtol=1e-5,
            atol=1e-15,
            err_msg=name,
        )


def test_pinocchio_joint_positions_at_zero(params: dict[str, Any], pin_model: pin.Model) -> None:
    data = pin_model.createData()
    q0 = np.zeros(pin_model.nq)
    pin.framesForwardKinematics(pin_model, data, q0)
    T_world_base = data.oMf[pin_model.getFrameId(params['arm_base_link'])]
    expected = params['derived']['joint_positions_in_base_link_at_q0']
    assert sorted(expected) == sorted(_moving_joint_names(params))
    for name, xyz in expected.items():
        T_base_joint = T_world_base.actInv(data.oMi[pin_model.getJointId(name)])
        np.testing.assert_allclose(
            T_base_joint.translation, _floats(xyz), rtol=0.0, atol=1e-12, err_msg=name
        )
        # All arm and finger origins have rpy = 0: every joint frame is parallel to base_link.
        np.testing.assert_allclose(
            T_base_joint.rotation, np.eye(3), rtol=0.0, atol=1e-12, err_msg=name
        )
