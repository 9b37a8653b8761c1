"""Branching studies of Kusaka and Tanaka 2025 [PTT]: double and branched pendulums vs MuJoCo.

The double pendulum against MuJoCo, the branched pendulum, and its partial torque tensor
read per branch (Table 3) and as building blocks (Figs. 4 and 7).

[PTT] T. Kusaka, T. Tanaka, "Partial Torque Tensor and Its Building Block Representation
for Dynamics of Branching Structures Using Computational Graph", Robotics 2025, 14(3), 31,
doi:10.3390/robotics14030031.

* **Double pendulum in free fall** (section 2.2, Fig. 2): l = 1.0 / 0.8 m, m = 1.0 / 0.8 kg,
  damping 0.1 / 0.1, integrated with RK4 over the engine's M and C qd + g and compared with
  MuJoCo (the paper's physics engine) at t = 0.4, 0.7 and 1.0 s.
* **Branched pendulum** (section 3, Fig. 6): link 1 (l 0.9, m 2.0, d 1.0) carries two
  double pendulums at its tip: alpha (l 1.0 / 0.7, m 1.0 / 0.3, d 0.5 / 0.2) and beta
  (l 1.1 / 0.6, m 1.0 / 0.3, d 0.5 / 0.2); "all the centers of mass of the links are
  located in the middle of the links". Also checked against MuJoCo.
* **Per-branch tables** (Table 3): the 5 x 5 partial torque table of the branched pendulum
  read as two serial sub-tables, rows and columns (J1, J2, J3) x (L1, L2, L3) of each
  branch. A body's partial Lagrangian depends only on the joints of its root path, so each
  sub-table *is* the table of the serial arm made of link 1 and that branch alone (checked:
  the engine on that serial arm gives the same numbers), the entries across branches are
  structurally zero, and J1's torque is tau_11 plus the rest of row 1 of both sub-tables.
* **Building blocks** (Figs. 4 and 7): which entries are structurally non-zero (joint k on
  body i's root path) drawn as blocks, and the sub-tables at six instants coloured
  magenta (positive) / cyan (negative) as in Fig. 7.

Assumed where the paper is silent (also in ``summary.json``): uniform rods (centre of mass
mid-link, I = m l^2 / 12 about it; the double pendulum too), viscous damping at the joints,
planar motion in the vertical plane with counter-clockwise positive relative angles
(:mod:`plag_ros.core.studies.common`), g = 9.81 (MuJoCo's default), the double pendulum released
at rest from the horizontal, the branched one from theta_1 = 60 deg, alpha at (-100, 20)
deg and beta at (80, -30) deg, RK4 with dt = 1 ms on both sides.

Run: ``python examples/branching_partial_torque_tensor.py OUT [--duration 10]``
(``plag-ros study branching OUT``).
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from plag_ros.core.dynamics.engine import PartialLagrangian
from plag_ros.core.dynamics.model import RobotModel
from plag_ros.core.studies.common import AXIS, POINT_INERTIA, rk4, save_summary

__all__ = ['Link', 'DOUBLE', 'BRANCHED', 'tree_urdf', 'tree_mjcf', 'simulate',
           'simulate_mujoco', 'structure', 'branch_tables', 'main']

DT = 1e-3
CHECK_TIMES = (0.4, 0.7, 1.0)


@dataclass(frozen=True)
class Link:
    """A rod of a planar tree: joint ``J<name>`` at the tip of ``parent`` (None: the root)."""

    name: str
    parent: str | None
    length: float
    mass: float
    damping: float

    @property
    def inertia(self) -> float:
        return self.mass * self.length ** 2 / 12.0


DOUBLE = (Link('1', None, 1.0, 1.0, 0.1), Link('2', '1', 0.8, 0.8, 0.1))
BRANCHED = (Link('1', None, 0.9, 2.0, 1.0),
            Link('2a', '1', 1.0, 1.0, 0.5), Link('3a', '2a', 0.7, 0.3, 0.2),
            Link('2b', '1', 1.1, 1.0, 0.5), Link('3b', '2b', 0.6, 0.3, 0.2))
BRANCHES = {'alpha': ('1', '2a', '3a'), 'beta': ('1', '2b', '3b')}
Q0_DOUBLE = np.zeros(2)
Q0_BRANCHED = np.radians([60.0, -100.0, 20.0, 80.0, -30.0])   # order of BRANCHED


def _by_name(links) -> dict[str, Link]:
    return {link.name: link for link in links}


def tree_urdf(links, name: str = 'planar_tree') -> str:
    """URDF of a planar tree of rods (joints about -y, counter-clockwise positive)."""
    table = _by_name(links)
    parts = [f'<robot name="{name}">', '<link name="world"/>']
    for link in links:
        small = repr(POINT_INERTIA)
        parts.append(
            f'<link name="L{link.name}"><inertial><origin xyz="{link.length / 2!r} 0 0"/>'
            f'<mass value="{link.mass!r}"/><inertia ixx="{small}" iyy="{link.inertia!r}" '
            f'izz="{link.inertia!r}" ixy="0" ixz="0" iyz="0"/></inertial></link>')
        parent = 'world' if link.parent is None else f'L{link.parent}'
        x = 0.0 if link.parent is None else table[link.parent].length
        parts.append(
            f'<joint name="J{link.name}" type="continuous"><parent link="{parent}"/>'
            f'<child link="L{link.name}"/><origin xyz="{x!r} 0 0"/><axis xyz="{AXIS}"/>'
            f'<dynamics damping="{link.damping!r}"/></joint>')
    parts.append('</robot>')
    return '\n'.join(parts)


def tree_mjcf(links, *, gravity: float = 9.81, dt: float = DT) -> str:
    """The same tree as MuJoCo MJCF: hinges about -y, joint damping, RK4."""
    table = _by_name(links)
    children: dict[str | None, list[Link]] = {}
    for link in links:
        children.setdefault(link.parent, []).append(link)

    def body(link: Link) -> str:
        x = 0.0 if link.parent is None else table[link.parent].length
        inner = ''.join(body(c) for c in children.get(link.name, []))
        return (f'<body name="L{link.name}" pos="{x!r} 0 0">'
                f'<joint name="J{link.name}" type="hinge" axis="{AXIS}" '
                f'damping="{link.damping!r}"/>'
                f'<inertial pos="{link.length / 2!r} 0 0" mass="{link.mass!r}" '
                f'diaginertia="{POINT_INERTIA!r} {link.inertia!r} {link.inertia!r}"/>'
                f'{inner}</body>')

    roots = ''.join(body(link) for link in children[None])
    return (f'<mujoco><option timestep="{dt!r}" integrator="RK4" '
            f'gravity="0 0 {-gravity!r}"/><worldbody>{roots}</worldbody></mujoco>')


def _engine(links) -> tuple[PartialLagrangian, np.ndarray]:
    """Engine and the permutation from ``links`` order to the model's joint order."""
    model = RobotModel.from_urdf(tree_urdf(links))
    order = model.joint_index([f'J{link.name}' for link in links])
    return PartialLagrangian(model), order


def simulate(links, q0: np.ndarray, t_end: float, dt: float = DT, every: int = 10):
    """RK4 of ``M qdd = -d qd - (C qd + g)``; q in ``links`` order, (K,), (K, n), (K, n)."""
    engine, order = _engine(links)
    n = len(links)
    damping = engine.model.damping

    def rhs(t: float, x: np.ndarray) -> np.ndarray:
        q, qd = x[:n], x[n:]
        M, bias = (v.numpy() for v in engine.mass_matrix_and_bias(q, qd))
        return np.concatenate([qd, np.linalg.solve(M, -damping * qd - bias)])

    x0 = np.zeros(2 * n)
    x0[order] = q0
    t, x = rk4(rhs, x0, t_end, dt, every=every)
    return t, x[:, :n][:, order], x[:, n:][:, order]


def simulate_mujoco(links, q0: np.ndarray, times) -> np.ndarray:
    """MuJoCo (RK4, same dt) joint angles at ``times`` [s], (len(times), n) in links order."""
    import mujoco

    m = mujoco.MjModel.from_xml_string(tree_mjcf(links))
    d = mujoco.MjData(m)
    adr = [m.jnt_qposadr[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, f'J{link.name}')]
           for link in links]
    d.qpos[adr] = q0
    mujoco.mj_forward(m, d)
    out = []
    for t in times:
        while d.time < t - 1e-9:
            mujoco.mj_step(m, d)
        out.append(d.qpos[adr].copy())
    return np.array(out)


def positions(links, q: np.ndarray) -> dict[str, np.ndarray]:
    """Joint (start) and tip points of each link, (2, 2) [[x0, z0], [x1, z1]] [m]."""
    table = _by_name(links)
    index = {link.name: a for a, link in enumerate(links)}
    out: dict[str, np.ndarray] = {}

    def heading(name: str | None) -> float:
        return 0.0 if name is None else heading(table[name].parent) + q[index[name]]

    for link in links:
        start = np.zeros(2) if link.parent is None else out[link.parent][1]
        phi = heading(link.name)
        out[link.name] = np.array([start, start + link.length * np.array([np.cos(phi),
                                                                          np.sin(phi)])])
    return out


def structure(model: RobotModel) -> np.ndarray:
    """(n, B) bool: joint k lies on body i's root path (where D_k L_i can be non-zero)."""
    mask = np.zeros((model.n_joints, model.n_bodies), dtype=bool)
    for i in range(model.n_bodies):
        mask[model.root_path(int(model.body_joint[i])), i] = True
    return mask


def branch_tables(model: RobotModel, partial: np.ndarray) -> dict[str, np.ndarray]:
    """[PTT] Table 3: each branch's serial sub-table (..., 3, 3), rows J1 J2 J3 and
    columns L1 L2 L3 of that branch."""
    out = {}
    for branch, names in BRANCHES.items():
        rows = model.joint_index([f'J{n}' for n in names])
        cols = [model.body_names.index(f'L{n}') for n in names]
        out[branch] = partial[..., rows[:, None], cols]
    return out


def _cyan_magenta():
    from matplotlib.colors import LinearSegmentedColormap

    return LinearSegmentedColormap.from_list('cm', ['#00b5e2', 'white', '#d1008f'])


def double_pendulum(out: Path) -> dict:
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    t, q, _ = simulate(DOUBLE, Q0_DOUBLE, max(CHECK_TIMES), every=1)
    ours = np.array([q[np.argmin(np.abs(t - c))] for c in CHECK_TIMES])
    theirs = simulate_mujoco(DOUBLE, Q0_DOUBLE, CHECK_TIMES)
    fig, axes = plt.subplots(1, 3, figsize=(11.0, 3.8), sharey=True)
    for ax, c, qa, qb in zip(axes, CHECK_TIMES, ours, theirs, strict=True):
        upto = t <= c + 1e-12
        tips = np.array([[positions(DOUBLE, x)[name][1] for name in ('1', '2')]
                         for x in q[upto]])
        ax.plot(tips[:, 0, 0], tips[:, 0, 1], ':', color='tab:red', lw=1)
        ax.plot(tips[:, 1, 0], tips[:, 1, 1], ':', color='tab:blue', lw=1)
        for x, style, label in ((qa, '-o', 'partial Lagrangian (RK4)'),
                                (qb, '--s', 'MuJoCo (RK4)')):
            p = positions(DOUBLE, x)
            pts = np.vstack([p['1'][0], p['1'][1], p['2'][1]])
            ax.plot(pts[:, 0], pts[:, 1], style, ms=4, mfc='none', label=label)
        ax.set_title(f't = {c} s')
        ax.set_aspect('equal')
        ax.set_xlim(-1.9, 1.9)
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=8, loc='lower left')
    axes[0].set_ylabel('height [m]')
    fig.suptitle('Kusaka and Tanaka 2025, Fig. 2: double pendulum in free fall, ours vs '
                 'MuJoCo')
    fig.tight_layout()
    fig.savefig(out / 'fig2_double_pendulum.png', dpi=110)
    plt.close(fig)
    return {'check_times_s': list(CHECK_TIMES), 'ours_rad': ours.tolist(),
            'mujoco_rad': theirs.tolist(),
            'max_abs_diff_rad': float(np.abs(ours - theirs).max())}


def branched(out: Path, duration: float) -> dict:
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    engine, order = _engine(BRANCHED)
    model = engine.model
    t, q, qd = simulate(BRANCHED, Q0_BRANCHED, duration, every=10)
    check = [c for c in CHECK_TIMES + (2.0,) if c <= duration]
    theirs = simulate_mujoco(BRANCHED, Q0_BRANCHED, check)
    ours = np.array([q[np.argmin(np.abs(t - c))] for c in check])
    # accelerations for the decomposition: from the dynamics at each stored state
    q_m, qd_m = np.zeros_like(q), np.zeros_like(qd)
    q_m[:, order], qd_m[:, order] = q, qd
    M, bias = (v.numpy() for v in engine.mass_matrix_and_bias(q_m, qd_m))
    qdd_m = np.linalg.solve(M, (-model.damping * qd_m - bias)[..., None])[..., 0]
    d = engine.decompose(q_m, qd_m, qdd_m).numpy()
    mask = structure(model)
    tables = branch_tables(model, d['partial'])

    # each branch's sub-table is the table of the serial arm of link 1 and that branch
    serial_diff = {}
    for branch, names in BRANCHES.items():
        links = tuple(link for link in BRANCHED if link.name in names)
        sub_engine, sub_order = _engine(links)
        cols = [a for a, link in enumerate(BRANCHED) if link.name in names]
        qs, qds, qdds = (np.zeros((t.size, 3)) for _ in range(3))
        for x_sub, x in ((qs, q_m), (qds, qd_m), (qdds, qdd_m)):
            x_sub[:, sub_order] = x[:, order[cols]]
        serial = sub_engine.decompose(qs, qds, qdds).numpy()['partial']
        rows = sub_engine.model.joint_index([f'J{n}' for n in names])
        cols_b = [sub_engine.model.body_names.index(f'L{n}') for n in names]
        serial_diff[branch] = float(np.abs(serial[:, rows[:, None], cols_b]
                                           - tables[branch]).max())
    j1 = model.joint_index(['J1'])[0]
    superposed = (tables['alpha'][:, 0, :].sum(-1) + tables['beta'][:, 0, 1:].sum(-1))

    # Fig. 6: snapshots; Fig. 7: per-branch sub-tables at the same instants
    picks = [0.1, 0.4, 0.8, duration * 0.55, duration * 0.7, duration * 0.85]
    idx = [int(np.argmin(np.abs(t - c))) for c in picks]
    colors = {'1': 'k', '2a': 'tab:blue', '3a': 'tab:blue', '2b': 'tab:red', '3b': 'tab:red'}
    fig, axes = plt.subplots(1, 6, figsize=(16.0, 3.4), sharey=True)
    for ax, k, label in zip(axes, idx, 'abcdef', strict=True):
        lo = max(0, k - 40)
        for name in ('3a', '3b'):
            tip = np.array([positions(BRANCHED, x)[name][1] for x in q[lo:k + 1]])
            ax.plot(tip[:, 0], tip[:, 1], ':', color=colors[name], lw=1)
        for name, seg in positions(BRANCHED, q[k]).items():
            ax.plot(seg[:, 0], seg[:, 1], '-o', color=colors[name], ms=3)
        ax.set_title(f'({label}) t = {t[k]:.2f} s')
        ax.set_aspect('equal')
        ax.set_xlim(-2.7, 2.7)
        ax.set_ylim(-2.7, 2.7)
        ax.grid(True, alpha=0.3)
    fig.suptitle('Kusaka and Tanaka 2025, Fig. 6: branched pendulum (black link 1, blue '
                 'alpha, red beta)')
    fig.tight_layout()
    fig.savefig(out / 'fig6_branched_pendulum.png', dpi=100)
    plt.close(fig)

    vmax = max(float(np.abs(tables[b][idx]).max()) for b in BRANCHES)
    fig, axes = plt.subplots(2, 6, figsize=(16.0, 5.6))
    for col, (k, label) in enumerate(zip(idx, 'abcdef', strict=True)):
        for row, (branch, names) in enumerate(BRANCHES.items()):
            ax = axes[row, col]
            ax.imshow(tables[branch][k], cmap=_cyan_magenta(), vmin=-vmax, vmax=vmax)
            for (r, c), v in np.ndenumerate(tables[branch][k]):
                ax.text(c, r, f'{v:.1f}', ha='center', va='center', fontsize=7)
            ax.set_xticks(range(3), [f'L{n}' for n in names], fontsize=7)
            ax.set_yticks(range(3), [f'D{n}' for n in names], fontsize=7)
            edge = 'tab:blue' if branch == 'alpha' else 'tab:red'
            for spine in ax.spines.values():
                spine.set_edgecolor(edge)
                spine.set_linewidth(2)
            if row == 0:
                ax.set_title(f'({label}) t = {t[k]:.2f} s', fontsize=9)
    fig.suptitle('Kusaka and Tanaka 2025, Table 3 / Fig. 7: partial torques [N m] per branch '
                 '(top alpha, bottom beta); magenta +, cyan -; L1 column shared')
    fig.tight_layout()
    fig.savefig(out / 'fig7_branch_tables.png', dpi=100)
    plt.close(fig)

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10.0, 4.0),
                                 gridspec_kw={'width_ratios': [5, 4]})
    joints = list(model.joint_names)
    bodies = list(model.body_names)
    ax.imshow(mask, cmap='Greys', vmin=0, vmax=1.6)
    ax.set_xticks(range(len(bodies)), bodies)
    ax.set_yticks(range(len(joints)), [f'D {j}' for j in joints])
    ax.set_title('structurally non-zero D_k L_i (dark)')
    for branch, names in BRANCHES.items():
        body_cols = [bodies.index(f'L{n}') for n in names]
        joint_rows = list(model.joint_index([f'J{n}' for n in names]))
        color = 'tab:blue' if branch == 'alpha' else 'tab:red'
        ax.scatter(np.repeat(body_cols, 3), np.tile(joint_rows, 3), s=12, color=color,
                   label=f'{branch} sub-table')
    ax.legend(fontsize=8, loc='lower left')
    # building blocks: the root block shared, one column of blocks per branch
    bx.set_title('building blocks: L1 shared, a serial table per branch')
    for branch, dx, color in (('alpha', 1, 'tab:blue'), ('beta', -1, 'tab:red')):
        for r in range(3):
            for c in range(3):
                if r > c:
                    continue
                x = 0 if c == 0 else dx * c
                face = 'lightgray' if c == 0 else color
                bx.add_patch(plt.Rectangle((x - 0.45, -r - 0.45), 0.9, 0.9, facecolor=face,
                                           edgecolor='k', alpha=0.6))
                chain = BRANCHES[branch]
                bx.text(x, -r, f'D{chain[r]}\nL{chain[c]}', ha='center', va='center',
                        fontsize=7)
    bx.set_xlim(-2.7, 2.7)
    bx.set_ylim(-2.7, 0.7)
    bx.set_aspect('equal')
    bx.axis('off')
    fig.tight_layout()
    fig.savefig(out / 'fig4_building_blocks.png', dpi=100)
    plt.close(fig)
    return {
        'mujoco_check_times_s': check,
        'mujoco_max_abs_diff_rad': float(np.abs(ours - theirs).max()),
        'structural_zero_max_abs': float(np.abs(d['partial'][:, ~mask]).max()),
        'structural_nonzero_min_rms': float(np.sqrt(np.mean(d['partial'][:, mask] ** 2,
                                                            axis=0)).min()),
        'nonzero_entries': int(mask.sum()), 'entries': int(mask.size),
        'branch_table_minus_serial_arm_max_abs': serial_diff,
        'j1_torque_minus_superposition_max_abs': float(np.abs(
            d['torque'][:, j1] - superposed).max()),
        'final_speed_max': float(np.abs(qd[-1]).max()),
    }


ASSUMPTIONS = {
    'links': 'uniform rods, centre of mass mid-link, I = m l^2 / 12',
    'damping': 'viscous, at the joints',
    'angles': 'relative, counter-clockwise positive, vertical plane, gravity -z',
    'gravity_m_s2': 9.81,
    'double_initial': 'at rest, horizontal',
    'branched_initial_deg': {'J1': 60, 'J2a': -100, 'J3a': 20, 'J2b': 80, 'J3b': -30},
    'integrator': 'RK4, dt = 1 ms, ours and MuJoCo',
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('output_dir', type=Path, help='folder for the figures and summary')
    parser.add_argument('--duration', type=float, default=10.0,
                        help='seconds of the branched pendulum [10]')
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    out = args.output_dir
    out.mkdir(parents=True, exist_ok=True)
    summary = {'assumptions': ASSUMPTIONS,
               'double_pendulum': double_pendulum(out),
               'branched_pendulum': branched(out, args.duration)}
    save_summary(out, summary)
    return 0


if __name__ == '__main__':
    sys.exit(main())
