"""CDR templates: serialize a ROS message once, then refill its stamps and float64 fields.

A decomposition output (a JointState, a Float64MultiArray table, a MarkerArray of arrows,
an Image) keeps its names, sizes and layout from one sample to the next; only the stamp
and the numbers change. :class:`CdrTemplate` encodes one message in canonical
little-endian CDR, records where every stamp and float64 field lives, and writes many
messages (the bag writer) or one (the live node, published as serialized bytes) with
numpy copies instead of building rclpy message objects field by field.
"""
from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ['TEMPLATE_NS', 'CdrTemplate', 'cdr_encode']

_BASIC = {
    'double': ('<d', 8), 'float': ('<f', 4), 'int8': ('<b', 1), 'uint8': ('<B', 1),
    'char': ('<B', 1), 'octet': ('<B', 1), 'boolean': ('<?', 1), 'int16': ('<h', 2),
    'uint16': ('<H', 2), 'int32': ('<i', 4), 'uint32': ('<I', 4), 'int64': ('<q', 8),
    'uint64': ('<Q', 8), 'long double': ('<d', 8),
}


class _Encoder:
    """Canonical little-endian CDR of an rclpy message, with field offsets recorded."""

    def __init__(self) -> None:
        self.buf = bytearray(b'\x00\x01\x00\x00')
        self.stamps: list[tuple[int, int]] = []   # (offset, value [ns]) of every Time
        self.doubles: dict[str, tuple[int, int]] = {}
        self.padding: list[tuple[int, int]] = []

    def _pad(self, size: int) -> None:
        pad = (-(len(self.buf) - 4)) % size
        if pad:
            self.padding.append((len(self.buf), len(self.buf) + pad))
            self.buf += bytes(pad)

    def _basic(self, typename: str, value, path: str) -> None:
        fmt, size = _BASIC[typename]
        self._pad(size)
        if typename == 'double':
            self.doubles[path] = (len(self.buf), 1)
        if isinstance(value, (bytes, bytearray)):
            value = value[0]
        elif isinstance(value, str):
            value = ord(value)
        self.buf += struct.pack(fmt, value)

    def _string(self, value: str) -> None:
        data = value.encode() + b'\x00'
        self._pad(4)
        self.buf += struct.pack('<I', len(data)) + data

    def _sequence(self, value_type, values, path: str, *, fixed: int | None = None) -> None:
        count = len(values)
        if fixed is None:
            self._pad(4)
            self.buf += struct.pack('<I', count)
        name = type(value_type).__name__
        if name == 'BasicType':
            fmt, size = _BASIC[value_type.typename]
            if count:
                self._pad(size)
                if value_type.typename == 'double':
                    self.doubles[path] = (len(self.buf), count)
                if isinstance(values, (bytes, bytearray)):
                    self.buf += bytes(values)
                else:
                    dtype = np.dtype(fmt)
                    self.buf += np.asarray(values, dtype=dtype).tobytes()
            return
        for k, value in enumerate(values):
            self._value(value_type, value, f'{path}.{k}')

    def _value(self, slot, value, path: str) -> None:
        name = type(slot).__name__
        if name == 'BasicType':
            self._basic(slot.typename, value, path)
        elif name in ('UnboundedString', 'BoundedString'):
            self._string(value)
        elif name in ('UnboundedSequence', 'BoundedSequence'):
            self._sequence(slot.value_type, value, path)
        elif name == 'Array':
            self._sequence(slot.value_type, value, path, fixed=slot.size)
        elif name == 'NamespacedType':
            self.message(value, path)
        else:
            raise TypeError(f'{path}: cannot encode field type {name}')

    def message(self, msg, path: str = '') -> None:
        if type(msg).__name__ == 'Time':
            at = len(self.buf) + (-(len(self.buf) - 4)) % 4
            self.stamps.append((at, msg.sec * 1_000_000_000 + msg.nanosec))
        fields = msg.get_fields_and_field_types()
        for (field, _), slot in zip(fields.items(), msg.SLOT_TYPES):
            self._value(slot, getattr(msg, field), f'{path}.{field}' if path else field)


def cdr_encode(msg) -> bytes:
    """Canonical CDR (little-endian, zero padding, exact size) of an rclpy message.

    ``rclpy.serialization.serialize_message`` gives the same bytes except in alignment
    padding (left uninitialised by the middleware) and may append a few trailing bytes.
    """
    encoder = _Encoder()
    encoder.message(msg)
    return bytes(encoder.buf)


TEMPLATE_NS = 1_234_567_890_123_456_789
"""Stamp to build templates with: a value no constant Time field of a message holds."""


class CdrTemplate:
    """Bulk CDR for messages that differ only in header stamps and float64 fields.

    Encode one message (the template, built with ``t_ns=TEMPLATE_NS``) and record where
    its stamp fields (every ``builtin_interfaces/Time`` holding ``stamp_ns``; other times,
    e.g. the empty header of a marker's texture, keep their value) and float64 values
    live; :meth:`fill` then writes N stamps and N rows of values into N
    copies of the template with numpy. The template's strings, counts and other fields
    are shared by every message, so it must be built with the same names and array
    lengths as the messages it stands for.

    Args:
        msg: the template rclpy message.
        stamp_ns: the stamp the template was built with.

    Raises:
        ValueError: the template has Time fields but none holds ``stamp_ns``.

    Attributes:
        data: the template's CDR bytes; doubles: float64 field path -> (byte offset,
            count), e.g. ``'effort'``, ``'data'``, ``'markers.3.points.1.x'``;
            padding: ``(start, stop)`` byte ranges of alignment padding.
    """

    def __init__(self, msg, *, stamp_ns: int = TEMPLATE_NS) -> None:
        encoder = _Encoder()
        encoder.message(msg)
        self.data = bytes(encoder.buf)
        self.doubles = dict(encoder.doubles)
        self._stamps = [at for at, value in encoder.stamps if value == stamp_ns]
        if encoder.stamps and not self._stamps:
            raise ValueError(f'no stamp of the {type(msg).__name__} template holds '
                             f'{stamp_ns} ns; build the template with that stamp')
        self.padding = list(encoder.padding)
        self.size = len(self.data)

    def fill(self, t_ns: np.ndarray, values: Mapping[str, np.ndarray]) -> np.ndarray:
        """CDR of N messages as rows of an (N, size) uint8 array.

        Args:
            t_ns: (N,) int64 header stamps [ns] (every stamp field of the message).
            values: float64 field path -> (N, count) values (or (N,) for a scalar);
                fields not given keep the template's values.

        Raises:
            KeyError: an unknown path; ValueError: a count that does not match.
        """
        t_ns = np.asarray(t_ns, dtype=np.int64)
        n_rows = len(t_ns)
        out = np.empty((n_rows, self.size), dtype=np.uint8)
        out[:] = np.frombuffer(self.data, dtype=np.uint8)
        sec, nsec = np.divmod(t_ns, 1_000_000_000)
        stamp = np.empty((n_rows, 2), dtype='<u4')
        stamp[:, 0] = sec.astype('<i4').view('<u4')
        stamp[:, 1] = nsec
        stamp_bytes = stamp.view(np.uint8)
        for at in self._stamps:
            out[:, at:at + 8] = stamp_bytes
        for path, x in values.items():
            at, count = self.doubles[path]
            x = np.asarray(x, dtype='<f8').reshape(n_rows, -1)
            if x.shape[1] != count:
                raise ValueError(f'{path}: template has {count} values, got {x.shape[1]}')
            out[:, at:at + 8 * count] = np.ascontiguousarray(x).view(np.uint8)
        return out

    def slots(self, paths: Sequence[str]) -> np.ndarray:
        """Indices of the float64 fields ``paths`` in the message's double grid, in order
        (a field of count c gives c consecutive indices), for :meth:`fill_one`.

        CDR aligns every double to 8 bytes after the 4-byte encapsulation header, so the
        doubles of a message sit on one grid of 8-byte slots starting at byte 4.
        """
        index: list[int] = []
        for path in paths:
            at, count = self.doubles[path]
            first = (at - 4) // 8
            index.extend(range(first, first + count))
        return np.asarray(index, dtype=np.intp)

    def fill_one(self, t_ns: int, slots: np.ndarray | None = None,
                 values: np.ndarray | None = None) -> bytes:
        """One message: every stamp set to ``t_ns`` and the doubles at ``slots`` (from
        :meth:`slots`) set to ``values`` (flattened in the same order; none: the
        template's). For the live path, where :meth:`fill` would loop over hundreds of
        fields in Python."""
        buf = bytearray(self.data)
        if slots is not None:
            grid = np.frombuffer(buf, dtype='<f8', count=(len(buf) - 4) // 8, offset=4)
            grid[slots] = np.asarray(values, dtype=np.float64).reshape(-1)
        sec, nsec = divmod(int(t_ns), 1_000_000_000)
        for at in self._stamps:
            struct.pack_into('<iI', buf, at, sec, nsec)
        return bytes(buf)
