"""URDF -> RobotModel: structure, lumping, mimic joints, link poses and clear errors."""
from __future__ import annotations

import dataclasses

import numpy as np
import pinocchio as pin
import pytest
import torch
from pin_oracle import PinOracle
from robots import serial_chain, two_arm_torso

from plag_ros.core.dynamics.engine import PartialLagrangian
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path

ARM = ['crane_x7_shoulder_fixed_part_pan_joint', 'crane_x7_shoulder_revolute_part_tilt_joint',
       'crane_x7_upper_arm_revolute_part_twist_joint',
       'crane_x7_upper_arm_revolute_part_rotate_joint', 'crane_x7_lower_arm_fixed_part_joint',
       'crane_x7_lower_arm_revolute_part_joint', 'crane_x7_wrist_joint']
FINGERS = ['crane_x7_gripper_finger_a_joint', 'crane_x7_gripper_finger_b_joint']


@pytest.fixture(scope='module')
def crane():
    return RobotModel.from_urdf(default_urdf_path())


def test_crane_x7_structure(crane):
    assert crane.name == 'crane_x7' and crane.root_link == 'world'
    assert list(crane.joint_names) == ARM + FINGERS
    assert crane.body_names[0] == 'crane_x7_shoulder_revolute_part_link'
    assert crane.body_names[-2:] == ('crane_x7_gripper_finger_a_link',
                                     'crane_x7_gripper_finger_b_link')
    np.testing.assert_array_equal(crane.joint_parent, [-1, 0, 1, 2, 3, 4, 5, 6, 6])
    assert crane.root_path(0) == [0]
    assert crane.root_path(8) == [0, 1, 2, 3, 4, 5, 6, 8]     # finger b skips finger a
    # finger b follows finger a with the URDF default multiplier and offset
    np.testing.assert_array_equal(crane.mimic_source, [-1] * 8 + [7])
    assert crane.actuated.tolist() == [True] * 8 + [False]
    np.testing.assert_allclose(crane.effort_limit, [10, 10, 4, 4, 4, 4, 4, 4, 4])
    np.testing.assert_allclose(crane.friction, [0.2] * 7 + [0.8] * 2)
    np.testing.assert_allclose(crane.damping, 1e-6)
    assert crane.joint_lower[0] == pytest.approx(np.radians(-157))
    # moving mass: every link but the shoulder base, which is fixed to the world
    assert crane.body_mass.sum() == pytest.approx(1.4297, abs=1e-12)


def test_model_from_string_equals_model_from_path(crane):
    again = RobotModel.from_urdf(default_urdf_path().read_text())
    assert again.joint_names == crane.joint_names
    np.testing.assert_array_equal(again.body_inertia, crane.body_inertia)
    assert again.urdf_xml == crane.urdf_xml


@pytest.mark.parametrize('xml', [default_urdf_path().read_text(), serial_chain(seed=4),
                                 two_arm_torso(seed=6)],
                         ids=['crane_x7', 'serial10', 'two_arm_torso'])
def test_lumped_bodies_equal_pinocchio_inertias(xml):
    """Fixed links lumped into their moving parent exactly as Pinocchio does."""
    model = RobotModel.from_urdf(xml)
    oracle = PinOracle(xml, model)
    for i in range(model.n_bodies):
        inertia = oracle.pin.inertias[int(oracle.pin_of_ours[model.body_joint[i]]) + 1]
        assert model.body_mass[i] == pytest.approx(inertia.mass, rel=1e-13)
        np.testing.assert_allclose(model.body_com[i], inertia.lever, atol=1e-13)
        np.testing.assert_allclose(model.body_inertia[i], inertia.inertia, atol=1e-13)


@pytest.mark.parametrize('xml', [default_urdf_path().read_text(), serial_chain(seed=4),
                                 two_arm_torso(seed=6)],
                         ids=['crane_x7', 'serial10', 'two_arm_torso'])
def test_link_poses_equal_pinocchio_frames(xml):
    model = RobotModel.from_urdf(xml)
    oracle = PinOracle(xml, model)
    engine = PartialLagrangian(model)
    q = np.random.default_rng(0).uniform(-1.5, 1.5, model.n_joints)
    poses = engine.link_poses(q).numpy()
    data = oracle.pin.createData()
    pin.framesForwardKinematics(oracle.pin, data, oracle.config(q))
    for k, name in enumerate(model.link_names):
        frame = oracle.pin.getFrameId(name, pin.BODY)
        np.testing.assert_allclose(poses[k], data.oMf[frame].homogeneous, atol=1e-12,
                                   err_msg=name)


def test_fill_mimic_and_joint_index(crane):
    q = np.arange(9.0)
    filled = crane.fill_mimic(q)
    assert filled[8] == filled[7] == 7.0 and q[8] == 8.0  # input untouched
    xml = default_urdf_path().read_text().replace(
        'multiplier="1" offset="0"', 'multiplier="-0.5" offset="0.1"')
    odd = RobotModel.from_urdf(xml)
    batch = np.ones((4, 9))
    assert np.all(odd.fill_mimic(batch)[:, 8] == -0.5 + 0.1)
    assert np.all(odd.fill_mimic(batch, derivative=True)[:, 8] == -0.5)
    np.testing.assert_array_equal(crane.joint_index([ARM[3], FINGERS[0]]), [3, 7])
    with pytest.raises(ValueError, match=r"unknown joint names \['elbow', 'knee'\]"):
        crane.joint_index([ARM[0], 'elbow', 'knee'])


# --------------------------------------------------------------------------- bad URDFs
LINK = ('<link name="{0}"><inertial><mass value="1"/>'
        '<inertia ixx="0.01" iyy="0.01" izz="0.01" ixy="0" ixz="0" iyz="0"/></inertial></link>')


def urdf(*body: str) -> str:
    return '<robot name="bad">' + ''.join(body) + '</robot>'


def joint(name, kind, parent, child, extra=''):
    return (f'<joint name="{name}" type="{kind}"><parent link="{parent}"/>'
            f'<child link="{child}"/><axis xyz="0 0 1"/>{extra}</joint>')


@pytest.mark.parametrize('xml, message', [
    ('<robot name="x"><link name="a"', 'malformed URDF'),
    (urdf('<link name="base"/>', LINK.format('a'), joint('free', 'floating', 'base', 'a')),
     "joint 'free': type 'floating' is not supported"),
    (urdf('<link name="base"/>', LINK.format('a'), joint('plane', 'planar', 'base', 'a')),
     "joint 'plane': type 'planar'"),
    (urdf('<link name="base"/>', '<link name="a"/>', joint('j', 'revolute', 'base', 'a')),
     "link 'a' .*moving joint 'j'.* has no inertial"),
    (urdf('<link name="base"/>', LINK.format('a'), LINK.format('b'),
          joint('j1', 'revolute', 'base', 'a'), joint('j2', 'revolute', 'b', 'a')),
     "link 'a' has two parent joints"),
    (urdf(LINK.format('a'), LINK.format('b'), joint('j1', 'revolute', 'a', 'b'),
          joint('j2', 'revolute', 'b', 'a')), 'exactly one root link'),
    (urdf('<link name="base"/>', LINK.format('a'), joint('j', 'revolute', 'base', 'ghost')),
     "joint 'j': unknown link 'ghost'"),
    (urdf('<link name="base"/>',
          '<link name="a"><inertial><mass value="1"/><inertia ixx="0.01" iyy="-0.01" '
          'izz="0.01" ixy="0" ixz="0" iyz="0"/></inertial></link>',
          joint('j', 'revolute', 'base', 'a')), "link 'a': inertia is not positive definite"),
    (urdf('<link name="base"/>',
          '<link name="a"><inertial><mass value="-1"/><inertia ixx="0.01" iyy="0.01" '
          'izz="0.01" ixy="0" ixz="0" iyz="0"/></inertial></link>',
          joint('j', 'revolute', 'base', 'a')), "link 'a': mass must be positive"),
    (urdf('<link name="base"/>', LINK.format('a'),
          joint('j', 'revolute', 'base', 'a', '<origin xyz="0 nan 0"/>')),
     "joint 'j': origin is not finite"),
    (urdf('<link name="base"/>', LINK.format('a'), LINK.format('b'),
          joint('j', 'revolute', 'base', 'a'),
          joint('m', 'revolute', 'a', 'b', '<mimic joint="nobody"/>')),
     "joint 'm' mimics unknown moving joint 'nobody'"),
])
def test_bad_urdf_raises_value_error_naming_the_culprit(xml, message):
    with pytest.raises(ValueError, match=message):
        RobotModel.from_urdf(xml)


def test_missing_file_raises():
    with pytest.raises(FileNotFoundError, match='no_such.urdf'):
        RobotModel.from_urdf('/tmp/definitely/no_such.urdf')


def test_fixed_link_with_mass_on_the_root_loads_nothing():
    xml = urdf('<link name="base"/>', LINK.format('plate'), LINK.format('a'),
               joint('weld', 'fixed', 'base', 'plate'), joint('j', 'revolute', 'plate', 'a'))
    model = RobotModel.from_urdf(xml)
    assert model.n_bodies == 1 and model.body_mass[0] == 1.0
    assert model.link_joint[model.link_index('plate')] == -1


def test_changes_from_lists_every_difference(crane):
    """changes_from compares by name and exactly: a rebuilt model shows nothing; payloads
    and body edits show as added or changed bodies with what changed."""
    again = RobotModel.from_urdf(default_urdf_path())
    assert not again.changes_from(crane)
    loaded = crane.with_payload('tool', link='crane_x7_gripper_base_link', mass=0.2,
                                com=[0, 0, 0.05], inertia=np.eye(3) * 1e-4)
    changes = loaded.changes_from(crane)
    assert changes.added_bodies == ('tool',) and not changes.changed_bodies
    assert crane.changes_from(loaded).removed_bodies == ('tool',)
    moved = loaded.with_body('tool', mass=0.2, com=[0, 0.01, 0.05], inertia=np.eye(3) * 1e-4)
    assert moved.changes_from(loaded).changed_bodies == {'tool': ('com',)}
    heavier = loaded.with_body('tool', mass=0.3, com=[0, 0, 0.05],
                               inertia=np.eye(3) * 2e-4)
    assert heavier.changes_from(loaded).changed_bodies == {'tool': ('mass', 'inertia')}
    assert not heavier.changes_from(loaded).changed_joints


def test_the_digest_follows_the_figures_not_the_text(crane):
    """Two nodes compare digests: the same figures written otherwise (a comment, -0 for
    0) give the same digest; a body edit, a payload, another gravity or effort calibration
    does not."""
    text = crane.urdf_xml
    assert text.count('xyz="0 0 ') > 3
    same = RobotModel.from_urdf(text.replace('<robot ', '<!-- xacro -->\n<robot ', 1)
                                .replace('xyz="0 0 ', 'xyz="-0 0 '))
    assert same.digest() == crane.digest() and len(crane.digest()) == 16
    tool = crane.with_payload('tool', link='crane_x7_gripper_base_link', mass=0.2,
                              com=[0, 0, 0.05], inertia=np.eye(3) * 1e-4)
    heavier = tool.with_body('tool', mass=0.3, com=[0, 0, 0.05], inertia=np.eye(3) * 1e-4)
    moon = RobotModel.from_urdf(text, gravity=(0.0, 0.0, -1.62))
    calibrated = dataclasses.replace(crane, effort_calibration=np.ones(crane.n_joints))
    digests = {m.digest() for m in (crane, tool, heavier, moon, calibrated)}
    assert len(digests) == 5


def _with_declaration(text: str, encoding: str) -> str:
    """The URDF with its XML declaration replaced by one naming ``encoding``."""
    body = text.split('?>', 1)[1] if text.lstrip().startswith('<?xml') else text
    return f'<?xml version="1.0" encoding="{encoding}"?>{body}'


@pytest.mark.parametrize('encoding', ['utf-8', 'UTF-8', 'iso-8859-1'])
def test_a_declared_encoding_loads_from_text_and_file(crane, tmp_path, encoding):
    """What the SolidWorks exporter writes: an XML declaration naming the encoding, here
    with a non-ASCII comment, read as text and as a file in that encoding."""
    text = _with_declaration(crane.urdf_xml, encoding).replace(
        '<robot ', '<!-- Maß: kg, m -->\n<robot ', 1)
    path = tmp_path / 'exported.urdf'
    path.write_bytes(text.encode(encoding))
    for source in (text, path):
        model = RobotModel.from_urdf(source)
        assert model.joint_names == crane.joint_names
        np.testing.assert_array_equal(model.body_mass, crane.body_mass)
        assert 'Maß' in model.urdf_xml


def test_a_file_that_is_not_its_declared_encoding_is_refused(tmp_path):
    path = tmp_path / 'bad.urdf'
    path.write_bytes(b'<?xml version="1.0" encoding="utf-8"?>\n<robot name="r">\xff</robot>')
    with pytest.raises(ValueError, match='is not utf-8 text'):
        RobotModel.from_urdf(path)


def test_the_robots_own_description_loads_quietly_with_equal_torques(crane, capfd, caplog):
    """crane_x7_description's URDF carries a <ros2_control> block (and Gazebo settings):
    no "Unknown tag" line for those at start, the same torques as without them; any
    other unknown element is still reported, through the logger."""
    end = crane.urdf_xml.rindex('</robot>')
    extra = ('<ros2_control name="crane_x7" type="system"><hardware><plugin>'
             'crane_x7_hardware/CraneX7Hardware</plugin></hardware></ros2_control>\n'
             '<gazebo><plugin filename="libgazebo_ros2_control.so" name="x"/></gazebo>\n')
    robots = RobotModel.from_urdf(crane.urdf_xml[:end] + extra + crane.urdf_xml[end:])
    assert 'Unknown tag' not in capfd.readouterr().err
    assert not [r for r in caplog.records if 'Unknown tag' in r.getMessage()]
    rng = np.random.default_rng(27)
    q, qd, qdd = (crane.fill_mimic(rng.uniform(-1, 1, crane.n_joints)) for _ in range(3))
    np.testing.assert_array_equal(
        PartialLagrangian(robots, dtype=torch.float64).decompose(q, qd, qdd).numpy()['torque'],
        PartialLagrangian(crane, dtype=torch.float64).decompose(q, qd, qdd).numpy()['torque'])
    with caplog.at_level('WARNING', logger='plag_ros.core.dynamics.model'):
        RobotModel.from_urdf(crane.urdf_xml[:end] + '<camera_mount/>' + crane.urdf_xml[end:])
    assert [r.getMessage() for r in caplog.records] == [
        "URDF: Unknown tag \"camera_mount\" in /robot[@name='crane_x7']"]
