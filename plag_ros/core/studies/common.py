"""Shared pieces of the paper studies: planar arms as URDF, an integrator, plots, summaries.

Planar convention (all studies): the arm moves in the world x-z plane, every joint turns
about the world **-y** axis, link ``a`` points along its frame's +x, gravity is -z. Seen
with x to the right and z up, a positive angle is then counter-clockwise and lifts the
arm, as in the papers' postural operator ``e(theta) = (cos theta, sin theta)`` (Kusaka and
Tanaka 2022 [PL], section 2.2): the tip of a one-link arm is at ``l e(theta_1)``, of a
two-link arm at ``l_1 e(theta_1) + l_2 e(theta_1 + theta_2)`` (relative angles). About +y a
positive angle would turn the arm clockwise, mirroring every gravity term.

[PL] T. Kusaka, T. Tanaka, "Partial Lagrangian for Efficient Extension and Reconstruction
of Multi-DoF Systems and Efficient Analysis Using Automatic Differentiation", Robotics 2022,
11(6), 149, doi:10.3390/robotics11060149.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

__all__ = ['POINT_INERTIA', 'planar_chain_urdf', 'rk4', 'save_summary', 'plot_lines',
           'tip_positions']

POINT_INERTIA = 1e-9
"""Rotational inertia [kg*m^2] given to a point mass (the model requires a positive
definite inertia); its torque is below 1e-8 N*m for the motions studied."""

AXIS = '0 -1 0'
"""Joint axis of the planar studies (counter-clockwise positive, module docstring)."""


def _fmt(x: float) -> str:
    return repr(float(x))


def planar_chain_urdf(lengths: Sequence[float], masses: Sequence[float], *,
                      com: Sequence[float] | None = None,
                      inertia: Sequence[float] | None = None,
                      damping: Sequence[float] | None = None,
                      name: str = 'planar_chain') -> str:
    """URDF of a planar serial arm in the x-z plane (joints about -y, module docstring).

    Args:
        lengths: (n,) link lengths [m]; joint ``a + 1`` sits at ``lengths[a]`` along link a.
        masses: (n,) link masses [kg].
        com: (n,) distance of each link's centre of mass from its joint [m]; None puts a
            point mass at the link tip ([PL]'s pendulums).
        inertia: (n,) moment of inertia about the centre of mass, about the joint axis
            [kg*m^2]; None gives :data:`POINT_INERTIA`.
        damping: (n,) URDF joint damping [N*m*s/rad] (the engine reports it as friction).
        name: robot name.

    Joints are ``joint1 .. jointn`` (continuous), links ``link1 .. linkn`` on a root
    link ``world``; a massless ``tip`` link sits at the end of the last link.
    """
    n = len(lengths)
    com = list(lengths) if com is None else list(com)
    inertia = [POINT_INERTIA] * n if inertia is None else list(inertia)
    damping = [0.0] * n if damping is None else list(damping)
    if not (len(masses) == len(com) == len(inertia) == len(damping) == n):
        raise ValueError('lengths, masses, com, inertia and damping need one entry per link')
    parts = [f'<robot name="{name}">', '<link name="world"/>']
    parent, offset = 'world', 0.0
    for a in range(n):
        small = _fmt(POINT_INERTIA)
        parts.append(
            f'<link name="link{a + 1}"><inertial><origin xyz="{_fmt(com[a])} 0 0"/>'
            f'<mass value="{_fmt(masses[a])}"/><inertia ixx="{small}" '
            f'iyy="{_fmt(inertia[a])}" izz="{small}" ixy="0" ixz="0" iyz="0"/>'
            '</inertial></link>')
        parts.append(
            f'<joint name="joint{a + 1}" type="continuous"><parent link="{parent}"/>'
            f'<child link="link{a + 1}"/><origin xyz="{_fmt(offset)} 0 0"/>'
            f'<axis xyz="{AXIS}"/><dynamics damping="{_fmt(damping[a])}"/></joint>')
        parent, offset = f'link{a + 1}', lengths[a]
    parts.append('<link name="tip"/>')
    parts.append(f'<joint name="tip_joint" type="fixed"><parent link="{parent}"/>'
                 f'<child link="tip"/><origin xyz="{_fmt(offset)} 0 0"/></joint>')
    parts.append('</robot>')
    return '\n'.join(parts)


def tip_positions(q: np.ndarray, lengths: Sequence[float]) -> np.ndarray:
    """Joint-end positions of a planar chain: (..., n) angles -> (..., n, 2) (x, z) [m].

    ``p_i = sum_{a <= i} l_a e(theta_1 + ... + theta_a)``, the postural operator of [PL]
    (relative angles, counter-clockwise positive).
    """
    phi = np.cumsum(q, axis=-1)
    steps = np.stack([np.cos(phi), np.sin(phi)], axis=-1) * np.asarray(lengths)[:, None]
    return np.cumsum(steps, axis=-2)


def rk4(rhs: Callable[[float, np.ndarray], np.ndarray], x0: np.ndarray, t_end: float,
        dt: float, *, every: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Classical fourth-order Runge-Kutta with a fixed step.

    Args:
        rhs: ``f(t, x) -> dx/dt`` for the state x (here ``[q, qd]``).
        x0: initial state.
        t_end: final time [s]; ``round(t_end / dt)`` steps are taken.
        dt: step [s].
        every: keep one state in ``every`` steps.

    Returns:
        t (K,), x (K, len(x0)) including the initial state.
    """
    steps = int(round(t_end / dt))
    x = np.array(x0, dtype=float)
    ts, xs = [0.0], [x.copy()]
    for k in range(steps):
        t = k * dt
        k1 = rhs(t, x)
        k2 = rhs(t + dt / 2, x + dt / 2 * k1)
        k3 = rhs(t + dt / 2, x + dt / 2 * k2)
        k4 = rhs(t + dt, x + dt * k3)
        x = x + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        if (k + 1) % every == 0:
            ts.append((k + 1) * dt)
            xs.append(x.copy())
    return np.array(ts), np.array(xs)


def plot_lines(path: Path, t: np.ndarray, series: Sequence[np.ndarray],
               labels: Sequence[str], title: str, ylabel: str, *,
               colors: Sequence[str | None] | None = None, xlabel: str = 'time [s]',
               styles: Sequence[str] | None = None) -> None:
    """One small line figure (PNG, 120 dpi); ``styles`` are matplotlib line styles."""
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.0, 3.6))
    colors = colors or [None] * len(series)
    styles = styles or ['-'] * len(series)
    for y, label, color, style in zip(series, labels, colors, styles, strict=True):
        ax.plot(t, y, style, color=color, label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def save_summary(out: Path, summary: dict) -> None:
    """Write ``summary.json`` (indented, numpy scalars as floats) and print it."""
    def plain(x):
        if isinstance(x, dict):
            return {str(k): plain(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [plain(v) for v in x]
        if isinstance(x, np.ndarray):
            return plain(x.tolist())
        if isinstance(x, (np.floating, np.integer)):
            return x.item()
        return x

    text = json.dumps(plain(summary), indent=2) + '\n'
    (out / 'summary.json').write_text(text)
    print(text, end='')
