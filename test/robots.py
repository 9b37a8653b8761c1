"""Generated URDF robots for tests: random but seeded, with every feature the model handles.

Each generator returns URDF XML text. Inertial figures are drawn so every inertia is a
physically valid (positive definite, triangle-inequality) tensor with an arbitrary
orientation, and joint origins carry arbitrary rotations, so nothing is accidentally
axis-aligned.
"""
from __future__ import annotations

import numpy as np


def _fmt(values) -> str:
    return ' '.join(repr(float(v)) for v in values)


def _inertial(rng: np.random.Generator) -> str:
    mass = rng.uniform(0.2, 2.0)
    # Principal moments obeying the triangle inequality, then a random orientation (rpy).
    a, b = rng.uniform(0.002, 0.02, size=2)
    c = rng.uniform(abs(a - b) + 1e-4, a + b - 1e-4)
    com = rng.uniform(-0.05, 0.05, size=3)
    rpy = rng.uniform(-np.pi, np.pi, size=3)
    return (f'<inertial><origin xyz="{_fmt(com)}" rpy="{_fmt(rpy)}"/>'
            f'<mass value="{float(mass)!r}"/>'
            f'<inertia ixx="{float(a)!r}" iyy="{float(b)!r}" izz="{float(c)!r}" '
            'ixy="0" ixz="0" iyz="0"/>'
            '</inertial>')


def _origin(rng: np.random.Generator, length: float = 0.2) -> str:
    xyz = rng.uniform(-0.05, 0.05, size=3) + np.array([0.0, 0.0, length])
    rpy = rng.uniform(-0.6, 0.6, size=3)
    return f'<origin xyz="{_fmt(xyz)}" rpy="{_fmt(rpy)}"/>'


def _axis(rng: np.random.Generator) -> str:
    axis = rng.normal(size=3)
    return f'<axis xyz="{_fmt(axis / np.linalg.norm(axis))}"/>'


def _joint(name, kind, parent, child, rng, *, damping=0.05, friction=0.1) -> str:
    body = f'<joint name="{name}" type="{kind}"><parent link="{parent}"/>' \
           f'<child link="{child}"/>{_origin(rng)}'
    if kind != 'fixed':
        body += _axis(rng)
        lim = '0.3' if kind == 'prismatic' else '3.0'
        body += f'<limit lower="-{lim}" upper="{lim}" effort="50" velocity="5"/>'
        body += f'<dynamics damping="{damping}" friction="{friction}"/>'
    return body + '</joint>'


def serial_chain(seed: int = 0, n: int = 10) -> str:
    """n-DoF serial chain mixing revolute and prismatic joints, fixed links in between.

    Every third moving link carries a massive link on a fixed joint (lumping), and one
    fixed link with mass hangs from the world (it must load no joint).
    """
    rng = np.random.default_rng(seed)
    parts = ['<robot name="serial_chain">', '<link name="world"/>',
             f'<link name="pedestal">{_inertial(rng)}</link>',
             '<joint name="pedestal_joint" type="fixed"><parent link="world"/>'
             '<child link="pedestal"/></joint>']
    parent = 'pedestal'
    kinds = ['revolute', 'prismatic', 'continuous']
    for j in range(n):
        kind = kinds[j % 3] if j % 4 != 3 else 'revolute'
        link = f'link{j}'
        parts.append(f'<link name="{link}">{_inertial(rng)}</link>')
        parts.append(_joint(f'joint{j}', kind, parent, link, rng))
        parent = link
        if j % 3 == 0:
            extra = f'link{j}_bracket'
            parts.append(f'<link name="{extra}">{_inertial(rng)}</link>')
            parts.append(_joint(f'joint{j}_bracket', 'fixed', link, extra, rng))
            if j % 2 == 0:  # continue the chain through the fixed bracket
                parent = extra
    parts.append('</robot>')
    return '\n'.join(parts)


def two_arm_torso(seed: int = 1, arm_dof: int = 4) -> str:
    """A branching tree: a torso joint carrying two arms (the branching systems of
    Kusaka and Tanaka 2025 [PTT])."""
    rng = np.random.default_rng(seed)
    parts = ['<robot name="two_arm_torso">', '<link name="base"/>',
             f'<link name="torso">{_inertial(rng)}</link>',
             _joint('torso_joint', 'revolute', 'base', 'torso', rng),
             f'<link name="chest">{_inertial(rng)}</link>',
             _joint('chest_fixed', 'fixed', 'torso', 'chest', rng)]
    for side in ('left', 'right'):
        parent = 'chest'
        for j in range(arm_dof):
            link = f'{side}_link{j}'
            kind = 'prismatic' if j == 2 else 'revolute'
            parts.append(f'<link name="{link}">{_inertial(rng)}</link>')
            parts.append(_joint(f'{side}_joint{j}', kind, parent, link, rng))
            parent = link
    parts.append('</robot>')
    return '\n'.join(parts)


def planar_arm(lengths, coms, masses, inertias_zz, *, name='planar_arm') -> str:
    """Planar serial arm of joints rotating about +y (continuous joints).

    Links lie along local +x when q = 0, joints rotate about +y, gravity (-z) acts in the
    plane of motion. Link a has length ``lengths[a]``, COM at ``coms[a]`` along x, mass and
    moment of inertia about the COM around the joint axis ``inertias_zz[a]``.
    """
    parts = [f'<robot name="{name}">', '<link name="world"/>']
    parent, offset = 'world', 0.0
    for a, (length, com, mass, izz) in enumerate(zip(lengths, coms, masses, inertias_zz)):
        link = f'link{a + 1}'
        # Small ixx/izz keep the tensor positive definite without touching planar motion.
        parts.append(
            f'<link name="{link}"><inertial><origin xyz="{com!r} 0 0"/>'
            f'<mass value="{mass!r}"/><inertia ixx="1e-6" iyy="{izz!r}" izz="1e-6" '
            'ixy="0" ixz="0" iyz="0"/></inertial></link>')
        parts.append(
            f'<joint name="joint{a + 1}" type="continuous"><parent link="{parent}"/>'
            f'<child link="{link}"/><origin xyz="{offset!r} 0 0"/><axis xyz="0 1 0"/>'
            '</joint>')
        parent, offset = link, length
    parts.append('</robot>')
    return '\n'.join(parts)
