"""Compact layout of a decomposition: only the entries the robot's tree can make non-zero.

Body i loads joint k only if k lies on i's path to the root: ``partial[k, i]`` and
``gravity[k, i]`` are structurally zero otherwise. Its mass matrix ``M_i`` and its velocity
terms involve only the joints on that same path, so ``acceleration[k, i, s]`` and
``velocity[k, i, s]`` are zero unless both k and s lie on it. On a serial chain of n joints
that keeps n(n + 1)/2 of the n^2 (joint, body) pairs and n(n + 1)(2n + 1)/6 of the n^3
(joint, body, source) triples: about a third of the dense size for long chains.

:class:`CompactLayout` holds the index maps and packs/unpacks any batch exactly (the kept
entries are copied, the others are zero by construction, so a round trip is bit-exact).
The dense layout stays the API of :mod:`plag_ros.core.dynamics.engine`; this one is for storage
(``plag-ros analyze --npz-layout compact``) and for anyone moving many samples around.

Order of the kept entries: bodies in model order, for each body the joints on its path root
first (pairs); for each pair, the sources on the body's path root first (triples).

Pure numpy, no ROS or torch.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from plag_ros.core.dynamics.model import RobotModel

__all__ = ['PAIR_FIELDS', 'TRIPLE_FIELDS', 'CompactLayout', 'load_analysis']

PAIR_FIELDS = ('partial', 'gravity')
"""Fields shaped (..., n, B): kept at the (joint, body) pairs."""

TRIPLE_FIELDS = ('acceleration', 'velocity')
"""Fields shaped (..., n, B, n): kept at the (joint, body, source) triples."""

_INDEX_KEYS = ('pair_joint', 'pair_body', 'triple_joint', 'triple_body', 'triple_source')
_PREFIX = 'compact_'


@dataclass(frozen=True, eq=False)
class CompactLayout:
    """Index maps of the structurally non-zero entries of a model's decomposition.

    Attributes:
        n_joints: n; n_bodies: B.
        pair_joint, pair_body: (P,) int64 joint k and body i of each kept pair.
        triple_joint, triple_body, triple_source: (T,) int64 k, i, s of each kept triple.
    """

    n_joints: int
    n_bodies: int
    pair_joint: np.ndarray
    pair_body: np.ndarray
    triple_joint: np.ndarray
    triple_body: np.ndarray
    triple_source: np.ndarray
    _flat_cache: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    @classmethod
    def from_model(cls, model: RobotModel) -> CompactLayout:
        """The layout of ``model``'s tree (see the module docstring for the order)."""
        pairs, triples = [], []
        for i in range(model.n_bodies):
            path = model.root_path(int(model.body_joint[i]))
            pairs += [(k, i) for k in path]
            triples += [(k, i, s) for k in path for s in path]
        p = np.array(pairs, dtype=np.int64).reshape(-1, 2)
        t = np.array(triples, dtype=np.int64).reshape(-1, 3)
        return cls(model.n_joints, model.n_bodies, p[:, 0], p[:, 1], t[:, 0], t[:, 1], t[:, 2])

    def _flat(self, field: str) -> np.ndarray:
        """Indices of the kept entries in the flattened (n*B or n*B*n) trailing block: one
        ``take`` along one axis is several times faster than three index arrays."""
        key = 'pair' if field in PAIR_FIELDS else 'triple'
        cached = self._flat_cache.get(key)
        if cached is None:
            n, B = self.n_joints, self.n_bodies
            if key == 'pair':
                cached = self.pair_joint * B + self.pair_body
            else:
                cached = (self.triple_joint * B + self.triple_body) * n + self.triple_source
            self._flat_cache[key] = cached
        return cached

    @property
    def n_pairs(self) -> int:
        return int(self.pair_joint.size)

    @property
    def n_triples(self) -> int:
        return int(self.triple_joint.size)

    def nbytes(self, itemsize: int = 8) -> tuple[int, int]:
        """Bytes of one sample's decomposition, (dense, compact), at ``itemsize`` bytes per
        number (torque and friction, n each, are stored whole in both)."""
        n, B = self.n_joints, self.n_bodies
        dense = 2 * n + 2 * n * B + 2 * n * B * n
        compact = 2 * n + 2 * self.n_pairs + 2 * self.n_triples
        return dense * itemsize, compact * itemsize

    def pack(self, dense: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Keep the structurally non-zero entries of the pair and triple fields.

        Args:
            dense: arrays keyed by field name with any leading batch dims, e.g.
                ``Decomposition.numpy()``; fields other than :data:`PAIR_FIELDS` and
                :data:`TRIPLE_FIELDS` are passed through unchanged.

        Returns:
            The same keys; pair fields (..., P), triple fields (..., T).

        Raises:
            ValueError: a field's trailing shape is not this model's.
        """
        n, B = self.n_joints, self.n_bodies
        out = {}
        for name, value in dense.items():
            value = np.asarray(value)
            if name in PAIR_FIELDS or name in TRIPLE_FIELDS:
                trailing = (n, B) if name in PAIR_FIELDS else (n, B, n)
                self._check(name, value, trailing)
                flat = value.reshape(value.shape[:value.ndim - len(trailing)] + (-1,))
                out[name] = np.take(flat, self._flat(name), axis=-1)
            else:
                out[name] = value
        return out

    def unpack(self, compact: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The dense arrays back: kept entries in place, zeros elsewhere (exact inverse of
        :meth:`pack` on a decomposition of this model).

        Raises:
            ValueError: a field's last axis is not this layout's P or T.
        """
        n, B = self.n_joints, self.n_bodies
        out = {}
        for name, value in compact.items():
            value = np.asarray(value)
            if name in PAIR_FIELDS or name in TRIPLE_FIELDS:
                pair = name in PAIR_FIELDS
                self._check(name, value, (self.n_pairs if pair else self.n_triples,))
                trailing = (n, B) if pair else (n, B, n)
                full = np.zeros(value.shape[:-1] + (int(np.prod(trailing)),), dtype=value.dtype)
                full[..., self._flat(name)] = value
                out[name] = full.reshape(value.shape[:-1] + trailing)
            else:
                out[name] = value
        return out

    def index_arrays(self) -> dict[str, np.ndarray]:
        """The index maps as named arrays (``compact_pair_joint``, ...), to store beside
        packed data; :meth:`from_index_arrays` rebuilds the layout without the model."""
        shape = np.array([self.n_joints, self.n_bodies], dtype=np.int64)
        return {f'{_PREFIX}shape': shape,
                **{f'{_PREFIX}{key}': getattr(self, key) for key in _INDEX_KEYS}}

    @classmethod
    def from_index_arrays(cls, arrays: Mapping[str, np.ndarray]) -> CompactLayout:
        """The layout stored by :meth:`index_arrays` (KeyError if there is none)."""
        n, B = (int(x) for x in arrays[f'{_PREFIX}shape'])
        pj, pb, tj, tb, ts = (np.asarray(arrays[f'{_PREFIX}{key}'], dtype=np.int64)
                              for key in _INDEX_KEYS)
        return cls(n, B, pj, pb, tj, tb, ts)

    @staticmethod
    def _check(name: str, value: np.ndarray, trailing: tuple[int, ...]) -> None:
        if value.ndim < len(trailing) or value.shape[-len(trailing):] != trailing:
            raise ValueError(f'{name}: trailing shape {trailing} expected, got {value.shape} '
                             '(another model, or the other layout?)')


def load_analysis(path: str | Path) -> dict[str, np.ndarray]:
    """An ``analysis.npz`` from ``plag-ros analyze`` as dense arrays, whichever layout it
    was written in (the compact one is expanded; the index maps are dropped)."""
    with np.load(path) as npz:
        arrays = {key: npz[key] for key in npz.files}
    if f'{_PREFIX}shape' not in arrays:
        return arrays
    layout = CompactLayout.from_index_arrays(arrays)
    packed = {k: v for k, v in arrays.items() if not k.startswith(_PREFIX)}
    return layout.unpack(packed)
