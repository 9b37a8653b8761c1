"""Extension and reconstruction (Kusaka and Tanaka 2022 [PL]): ``PartialLagrangian.extend``
against a full recomputation, to RTOL = 1e-10 of the largest entry of each table (float64
rounding).

The models are small planar arms in the vertical plane (joints about +y, links along +x,
gravity -z) built from URDF text here, so each test states exactly what changes: a joint
turned into a slider ([PL], Fig. 4), a link length, an appended joint and body
(n -> n + 1), an appended payload, a removed link, a re-parented joint, inertia, mimic and
limits. Each test also checks which columns were reused and that the stale previous result
differs from the new one, so reuse of a changed column cannot pass unnoticed.

[PL] T. Kusaka, T. Tanaka, "Partial Lagrangian for Efficient Extension and Reconstruction
of Multi-DoF Systems and Efficient Analysis Using Automatic Differentiation", Robotics 2022,
11(6), 149, doi:10.3390/robotics11060149.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from pin_oracle import PinOracle

from plag_ros.core.dynamics.engine import FIELDS, PartialLagrangian
from plag_ros.core.dynamics.model import RobotModel

RTOL = 1e-10


def assert_close(actual, expected, *, what=''):
    actual = np.asarray(actual.detach().cpu() if torch.is_tensor(actual) else actual)
    expected = np.asarray(expected.detach().cpu() if torch.is_tensor(expected) else expected)
    assert actual.shape == expected.shape, (what, actual.shape, expected.shape)
    scale = max(np.abs(expected).max(initial=0.0), 1.0)
    err = np.abs(actual - expected).max(initial=0.0)
    assert err <= RTOL * scale + 1e-12, f'{what}: max error {err:.3e} (scale {scale:.3e})'


def link(name, parent, *, kind='revolute', x=1.0, axis='0 1 0', mass=1.0, com=0.5,
         izz=0.08, mimic=None, upper=3.0):
    """One body and the joint that carries it: ``(parent link, child, xml)``.

    The joint frame sits ``x`` [m] along the parent link's x axis; the body's COM ``com``
    [m] along its own x axis, moment of inertia ``izz`` about the joint axis (tiny about
    the others, to stay positive definite).
    """
    extra = f'<mimic joint="{mimic}" multiplier="2.0"/>' if mimic else ''
    return (f'<link name="{name}"><inertial><origin xyz="{com!r} 0 0"/>'
            f'<mass value="{mass!r}"/><inertia ixx="1e-4" iyy="{izz!r}" izz="1e-4" '
            'ixy="0" ixz="0" iyz="0"/></inertial></link>'
            f'<joint name="j_{name}" type="{kind}"><parent link="{parent}"/>'
            f'<child link="{name}"/><origin xyz="{x!r} 0 0"/><axis xyz="{axis}"/>'
            f'<limit lower="-3.0" upper="{upper!r}" effort="10" velocity="5"/>{extra}'
            '</joint>')


def robot(*links):
    xml = '<robot name="arm"><link name="world"/>' + ''.join(links) + '</robot>'
    return xml, RobotModel.from_urdf(xml)


def arm(n, **changes):
    """n-link planar arm link1..linkn, each 1 m long ([PL]'s 3-link pendulum); keyword
    ``linkK={...}`` overrides the arguments of :func:`link` for link K."""
    parts = []
    for a in range(1, n + 1):
        kw = dict(x=0.0 if a == 1 else 1.0, mass=1.0 + 0.1 * a, com=0.4 + 0.05 * a)
        kw.update(changes.get(f'link{a}', {}))
        parts.append(link(f'link{a}', 'world' if a == 1 else f'link{a - 1}', **kw))
    return robot(*parts)


def states(model, batch=(4,), seed=0):
    rng = np.random.default_rng(seed)
    n = model.n_joints
    return (rng.uniform(-2, 2, (*batch, n)), rng.uniform(-3, 3, (*batch, n)),
            rng.uniform(-10, 10, (*batch, n)))


def by_name(x, old_model, new_model):
    """New-model joint values (..., n_new) -> the previous model's joints (by name)."""
    return x[..., new_model.joint_index(old_model.joint_names)]


def check_extension(old, new, q, qd, qdd, *, reused, new_xml=None):
    """extend() from ``old`` to ``new`` equals a full recomputation; returns the plan."""
    engine = PartialLagrangian(new)
    previous = PartialLagrangian(old).decompose(*(by_name(x, old, new) for x in (q, qd, qdd)))
    extended = engine.extend(previous, old, q, qd, qdd)
    full = PartialLagrangian(new).decompose(q, qd, qdd)
    for field in FIELDS:
        assert_close(getattr(extended, field), getattr(full, field), what=field)
    plan = engine.last_extension
    assert plan is not None
    assert plan.reused == tuple(reused), plan
    assert set(plan.recomputed) == set(new.body_names) - set(reused)
    # reused columns are the previous values moved, bit for bit
    shared = [name for name in new.joint_names if name in old.joint_names]
    kn, ko = new.joint_index(shared), old.joint_index(shared)
    for i, o in plan.reused_columns:
        assert torch.equal(extended.partial[..., kn, i], previous.partial[..., ko, o])
        assert torch.equal(extended.velocity[..., kn, i, :][..., kn],
                           previous.velocity[..., ko, o, :][..., ko])
    if new_xml is not None:   # and the full result is right: Pinocchio on the new URDF
        oracle = PinOracle(new_xml, new)
        flat = [x.reshape(-1, new.n_joints) for x in (q, qd, qdd)]
        tau = extended.torque.reshape(-1, new.n_joints)
        for b in range(len(flat[0])):
            assert_close(tau[b], oracle.rnea(flat[0][b], flat[1][b], flat[2][b]),
                         what='torque vs pinocchio')
    return plan, previous, full


def stale_error(previous, full, rows, columns):
    """Largest difference between the previous and the new table on shared entries."""
    return float((previous.partial[..., rows, :][..., columns]
                  - full.partial[..., rows, :][..., columns]).abs().max())


# --------------------------------------------------------------------------- reconstruction
def test_revolute_to_slider_recomputes_the_slider_and_what_it_carries():
    """[PL], Fig. 4: link 2's joint becomes a linear slider along the link."""
    _, old = arm(3)
    xml, new = arm(3, link2=dict(kind='prismatic', axis='1 0 0'))
    q, qd, qdd = states(new, seed=1)
    plan, previous, full = check_extension(old, new, q, qd, qdd, reused=['link1'],
                                           new_xml=xml)
    assert plan.changes.changed_joints == {'j_link2': ('type', 'axis')}
    assert 'j_link2 type, axis' in plan.recomputed['link2']
    assert 'j_link2' in plan.recomputed['link3']
    # what the old extend() handed back (the previous table) is far off
    assert stale_error(previous, full, [0, 1, 2], [1, 2]) > 0.5


def test_changed_link_length_recomputes_only_the_bodies_beyond_it():
    """Joint 3's origin 1.0 -> 0.5 m (link 2 shortened): links 1 and 2 are unaffected."""
    _, old = arm(3)
    xml, new = arm(3, link3=dict(x=0.5))
    q, qd, qdd = states(new, seed=2)
    plan, previous, full = check_extension(old, new, q, qd, qdd, reused=['link1', 'link2'],
                                           new_xml=xml)
    assert plan.changes.changed_joints == {'j_link3': ('origin',)}
    assert stale_error(previous, full, [0, 1, 2], [2]) > 0.5


def test_changed_axis_parent_and_inertia():
    _, old = arm(4)
    # joint 3 turns about z instead of y: bodies 3 and 4 change
    _, new = arm(4, link3=dict(axis='0 0 1'))
    q, qd, qdd = states(new, seed=3)
    plan, *_ = check_extension(old, new, q, qd, qdd, reused=['link1', 'link2'])
    assert plan.changes.changed_joints == {'j_link3': ('axis',)}
    # body 2 heavier: only its own column
    _, new = arm(4, link2=dict(mass=3.0, izz=0.2))
    plan, *_ = check_extension(old, new, q, qd, qdd, reused=['link1', 'link3', 'link4'])
    assert plan.changes.changed_bodies == {'link2': ('mass', 'inertia')}
    # link 4 re-hung from link 2 (same origin numbers): its path loses joint 3
    parts = [link('link1', 'world', x=0.0, mass=1.1, com=0.45),
             link('link2', 'link1', mass=1.2, com=0.5), link('link3', 'link2', mass=1.3,
                                                             com=0.55),
             link('link4', 'link2', mass=1.4, com=0.6)]
    xml, new = robot(*parts)
    plan, *_ = check_extension(old, new, q, qd, qdd, reused=['link1', 'link2', 'link3'],
                               new_xml=xml)
    assert plan.changes.changed_joints == {'j_link4': ('parent',)}
    assert 'root path' in plan.recomputed['link4']


def test_mimic_and_limits_are_reported_and_change_no_column():
    """The tables take every joint's q, so a mimic relation or a limit changes no entry."""
    _, old = arm(3)
    _, new = arm(3, link3=dict(mimic='j_link2', upper=2.0))
    q, qd, qdd = states(new, seed=4)
    plan, *_ = check_extension(old, new, q, qd, qdd, reused=['link1', 'link2', 'link3'])
    assert plan.changes.changed_joints == {'j_link3': ('mimic', 'limits')}
    assert plan.recomputed == {}


# --------------------------------------------------------------------------- extension
def test_appended_joint_and_body_n_to_n_plus_1():
    """[PL]'s extension i = n + 1: the old columns are reused with a zero row for the
    new joint (it is no ancestor of theirs); only the new body's column is computed."""
    _, old = arm(3)
    xml, new = arm(4)
    q, qd, qdd = states(new, batch=(2, 3), seed=5)
    plan, previous, full = check_extension(old, new, q, qd, qdd,
                                           reused=['link1', 'link2', 'link3'], new_xml=xml)
    assert plan.changes.added_joints == ('j_link4',)
    assert plan.changes.added_bodies == ('link4',)
    assert plan.recomputed == {'link4': 'new body'}
    extended = PartialLagrangian(new).extend(previous, old, q, qd, qdd)
    assert extended.partial.shape == (2, 3, 4, 4)
    assert not extended.partial[..., 3, :3].any()
    assert not extended.acceleration[..., :3, 3].any()


def test_appended_branch_joint_renumbers_joints():
    """A new branch on link 1, listed before joint 2 in the URDF, takes joint index 1:
    reused columns must move rows and sources to the new joint indices."""
    base = [link('link1', 'world', x=0.0, mass=1.1, com=0.45)]
    rest = [link('link2', 'link1', mass=1.2, com=0.5), link('link3', 'link2', mass=1.3,
                                                           com=0.55)]
    _, old = robot(*base, *rest)
    branch = link('side', 'link1', x=0.3, axis='1 0 0', mass=0.7, com=0.2)
    xml, new = robot(*base, branch, *rest)
    assert new.joint_names == ('j_link1', 'j_side', 'j_link2', 'j_link3')
    q, qd, qdd = states(new, seed=6)
    check_extension(old, new, q, qd, qdd, reused=['link1', 'link2', 'link3'], new_xml=xml)


def test_appended_payload_computes_one_column():
    _, old = arm(3)
    new = old.with_payload('load', link='link3', mass=0.8, com=[1.0, 0.0, 0.0],
                           inertia=np.diag([1e-4, 2e-3, 2e-3]))
    q, qd, qdd = states(new, seed=7)
    plan, *_ = check_extension(old, new, q, qd, qdd, reused=['link1', 'link2', 'link3'])
    assert plan.recomputed == {'load': 'new body'}
    # and back: removing the payload reuses every remaining column
    engine = PartialLagrangian(old)
    full = PartialLagrangian(new).decompose(q, qd, qdd)
    back = engine.extend(full, new, q, qd, qdd)
    assert engine.last_extension.changes.removed_bodies == ('load',)
    for field in FIELDS:
        assert_close(getattr(back, field), getattr(PartialLagrangian(old).decompose(
            q, qd, qdd), field), what=field)


def test_removed_link_n_to_n_minus_1():
    _, old = arm(4)
    _, new = arm(3)
    q, qd, qdd = states(new, seed=8)
    rng = np.random.default_rng(9)
    extra = [np.concatenate([x, rng.uniform(-1, 1, (len(x), 1))], -1) for x in (q, qd, qdd)]
    engine = PartialLagrangian(new)
    previous = PartialLagrangian(old).decompose(*extra)
    extended = engine.extend(previous, old, q, qd, qdd)
    assert engine.last_extension.changes.removed_joints == ('j_link4',)
    assert engine.last_extension.reused == ('link1', 'link2', 'link3')
    full = engine.decompose(q, qd, qdd)
    for field in FIELDS:
        assert_close(getattr(extended, field), getattr(full, field), what=field)


def test_unchanged_model_reuses_everything_and_friction_follows_the_new_model():
    xml_old = arm(3)[0]
    xml_new = xml_old.replace('<axis xyz="0 1 0"/>',
                              '<axis xyz="0 1 0"/><dynamics damping="0.3" friction="0.2"/>')
    old, new = RobotModel.from_urdf(xml_old), RobotModel.from_urdf(xml_new)
    q, qd, qdd = states(new, seed=10)
    plan, *_ = check_extension(old, new, q, qd, qdd, reused=['link1', 'link2', 'link3'])
    assert set(plan.changes.changed_joints.values()) == {('dynamics',)}


def test_torch_form_extends_too():
    """The float32/GPU engine splices the same way (float64 torch form here, 1e-10)."""
    _, old = arm(3)
    _, new = arm(4, link2=dict(kind='prismatic', axis='1 0 0'))
    q, qd, qdd = states(new, seed=11)
    engine = PartialLagrangian(new, compiled=False)
    previous = PartialLagrangian(old, compiled=False).decompose(
        *(by_name(x, old, new) for x in (q, qd, qdd)))
    extended = engine.extend(previous, old, q, qd, qdd)
    assert engine.last_extension.reused == ('link1',)
    full = PartialLagrangian(new).decompose(q, qd, qdd)
    for field in FIELDS:
        assert_close(getattr(extended, field), getattr(full, field), what=field)


def test_mismatched_previous_raises():
    _, old = arm(3)
    _, new = arm(4)
    q, qd, qdd = states(new, seed=12)
    previous = PartialLagrangian(old).decompose(q[:2, :3], qd[:2, :3], qdd[:2, :3])
    with pytest.raises(ValueError, match='batch'):
        PartialLagrangian(new).extend(previous, old, q, qd, qdd)
    with pytest.raises(ValueError, match='previous model'):
        PartialLagrangian(new).extend(previous, new, q[:2], qd[:2], qdd[:2])


# --------------------------------------------------------------------------- censoring
@pytest.mark.parametrize('m', [1, 2, 3])
def test_censoring_upper_left_block_is_the_shorter_arm(m):
    """[PL] section 2.1: "censoring in the middle is equivalent to the equation of
    motion for a short robot arm": the upper-left m x m block of the n-link table equals
    the m-link table, and the first m columns have no entries in rows beyond m."""
    n = 5
    _, long_arm = arm(n)
    xml, short_arm = arm(m)
    q, qd, qdd = states(long_arm, seed=13)
    long_out = PartialLagrangian(long_arm).decompose(q, qd, qdd)
    short_out = PartialLagrangian(short_arm).decompose(q[:, :m], qd[:, :m], qdd[:, :m])
    assert_close(long_out.partial[:, :m, :m], short_out.partial, what='partial')
    assert_close(long_out.gravity[:, :m, :m], short_out.gravity, what='gravity')
    for field in ('acceleration', 'velocity'):
        assert_close(getattr(long_out, field)[:, :m, :m, :m], getattr(short_out, field),
                     what=field)
        assert not getattr(long_out, field)[:, :, :m, m:].any()
    assert not long_out.partial[:, m:, :m].any()
    # the short arm's torque is the column sum of the block: Pinocchio on the short URDF
    oracle = PinOracle(xml, short_arm)
    for b in range(len(q)):
        assert_close(long_out.partial[b, :m, :m].sum(-1),
                     oracle.rnea(q[b, :m], qd[b, :m], qdd[b, :m]), what='block torque')
