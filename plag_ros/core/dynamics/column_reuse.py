"""Extension and reconstruction (Kusaka and Tanaka 2022 [PL]): reuse the columns a model
change leaves intact.

A body's column of every table (``partial[:, i]``, ``acceleration[:, i, :]``, ...) depends
only on that body's inertial figures and on the joints of its path to the root: their kind
(turning or sliding), axis, origin and order (see :mod:`plag_ros.core.dynamics.engine`). Every
other entry of the column is structurally zero. So after a change of the model, a column whose body
and root path are unchanged can be copied from a previous result of the same motion, with its rows
and sources moved to the new joint numbering, and only the other columns
need computing. [PL] (section 2.1): "censoring in the middle is equivalent to the
equation of motion for a short robot arm, and it is also easy to add i = n + 1 later".

[PL] T. Kusaka, T. Tanaka, "Partial Lagrangian for Efficient Extension and Reconstruction
of Multi-DoF Systems and Efficient Analysis Using Automatic Differentiation", Robotics 2022,
11(6), 149, doi:10.3390/robotics11060149.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from plag_ros.core.dynamics.model import ModelChanges, RobotModel

__all__ = ['ExtensionPlan', 'plan_extension', 'splice_tables']


@dataclass(frozen=True)
class ExtensionPlan:
    """Which columns :meth:`PartialLagrangian.extend` reuses and which it recomputes.

    A body's column of every table depends only on the body's inertial figures and on the
    joints of its path to the root (their type, axis, origin and order); every other row of
    it is structurally zero. A column is reused when all of those are unchanged.

    Attributes:
        changes: every difference between the two models (:meth:`RobotModel.changes_from`).
        reused: names of the bodies whose columns are copied from the previous result.
        recomputed: body name -> why its column is recomputed.
        reused_columns: (new index, previous index) of each reused body.
        recomputed_columns: new indices of the recomputed bodies, in body order.
    """

    changes: ModelChanges
    reused: tuple[str, ...]
    recomputed: dict[str, str]
    reused_columns: tuple[tuple[int, int], ...]
    recomputed_columns: tuple[int, ...]


def _column_signature(model: RobotModel, body: int) -> tuple[object, ...]:
    """Everything column ``body`` of the tables depends on, comparable across models.

    The body's joint, inertial figures and, for each joint of its root path (root first),
    its name, whether it slides or turns, its axis and its frame in the parent; gravity.
    """
    path = tuple(
        (model.joint_names[j], model.joint_types[j] == 'prismatic',
         tuple(model.joint_axis[j].tolist()), tuple(model.T_parent_joint[j].ravel().tolist()))
        for j in model.root_path(int(model.body_joint[body])))
    return (float(model.body_mass[body]), tuple(model.body_com[body].tolist()),
            tuple(model.body_inertia[body].ravel().tolist()), path, tuple(model.gravity))


def plan_extension(model: RobotModel, previous_model: RobotModel) -> ExtensionPlan:
    """Which body columns of ``model`` can be taken from a result of ``previous_model``.

    A column is reused when the body exists in both models (by name) with the same
    inertial figures, riding on a joint whose whole root path has the same joints (by
    name, in order) with the same kind (turning or sliding), axis and origin. Every
    other column is recomputed. Mimic relations, limits, damping and friction change
    no column (the tables take every joint's q; friction is always recomputed); they
    are still listed in ``changes``.
    """
    changes = model.changes_from(previous_model)
    old = {name: i for i, name in enumerate(previous_model.body_names)}
    reused: list[tuple[int, int]] = []
    recomputed: dict[str, str] = {}
    for i, name in enumerate(model.body_names):
        if name not in old:
            recomputed[name] = 'new body'
            continue
        o = old[name]
        if _column_signature(model, i) == _column_signature(previous_model, o):
            reused.append((i, o))
            continue
        why = [f'body {", ".join(changes.changed_bodies[name])}'] \
            if name in changes.changed_bodies else []
        path = [model.joint_names[j] for j in model.root_path(int(model.body_joint[i]))]
        old_path = [previous_model.joint_names[j]
                    for j in previous_model.root_path(int(previous_model.body_joint[o]))]
        if path != old_path:
            why.append(f'root path {old_path} -> {path}')
        if tuple(model.gravity) != tuple(previous_model.gravity):
            why.append(f'gravity {previous_model.gravity} -> {model.gravity}')
        why += [f'joint {j} {", ".join(changes.changed_joints[j])}' for j in path
                if j in changes.changed_joints]
        recomputed[name] = '; '.join(why) or 'figures changed'
    return ExtensionPlan(
        changes=changes,
        reused=tuple(model.body_names[i] for i, _ in reused),
        recomputed=recomputed,
        reused_columns=tuple(reused),
        recomputed_columns=tuple(model.body_names.index(name) for name in recomputed),
    )


def splice_tables(plan: ExtensionPlan, model: RobotModel, previous_model: RobotModel,
                  previous: dict[str, Tensor], fresh: dict[str, Tensor] | None,
                  batch: tuple[int, ...]) -> dict[str, Tensor]:
    """The tables of ``model`` from reused columns of ``previous`` and the ``fresh`` ones.

    Args:
        plan: from :func:`plan_extension` (model, previous_model).
        previous: ``partial`` and ``gravity`` (*batch, n', B'), ``acceleration`` and
            ``velocity`` (*batch, n', B', n') of ``previous_model``.
        fresh: the same fields for the columns ``plan.recomputed_columns`` only (None when
            there are none), on ``model``'s joints.

    Returns:
        partial, gravity (*batch, n, B) and acceleration, velocity (*batch, n, B, n);
        reused entries are copies of ``previous``'s, moved to ``model``'s joint indices.
    """
    n, B = model.n_joints, model.n_bodies
    old_joint = {name: k for k, name in enumerate(previous_model.joint_names)}
    shared = [(k, old_joint[name]) for k, name in enumerate(model.joint_names)
              if name in old_joint]
    device = previous['partial'].device

    def index(values: Sequence[int]) -> Tensor:
        return torch.as_tensor(list(values), dtype=torch.int64, device=device)

    kn, ko = index([k for k, _ in shared]), index([o for _, o in shared])
    inew = index([i for i, _ in plan.reused_columns])
    iold = index([o for _, o in plan.reused_columns])
    columns = list(plan.recomputed_columns)
    out = {}
    for name, old in previous.items():
        sources = old.dim() == len(batch) + 3
        table = old.new_zeros((*batch, n, B, n) if sources else (*batch, n, B))
        if sources:
            table[..., kn[:, None, None], inew[None, :, None], kn[None, None, :]] = \
                old[..., ko[:, None, None], iold[None, :, None], ko[None, None, :]]
        else:
            table[..., kn[:, None], inew[None, :]] = old[..., ko[:, None], iold[None, :]]
        if fresh is not None:
            if sources:
                table[..., :, columns, :] = fresh[name]
            else:
                table[..., :, columns] = fresh[name]
        out[name] = table
    return out
