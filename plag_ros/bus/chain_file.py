"""The servo chain a bus carries, as both sides of the wire know it: each servo's ID, model,
the joint it drives and its position limits, the bus's baud rate, the Return Delay Time and
firmware version the servos start with. One file per robot; ``crane_x7.yaml`` (beside this
module) is the CRANE-X7's, with its sources. The host's driver (:mod:`plag_ros.bus.host`)
and the emulated servos (:mod:`plag_ros.bus.emulator`) both read it.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ['CRANE_X7_BUS', 'BusConfig', 'ServoSpec']

CRANE_X7_BUS = Path(__file__).with_name('crane_x7.yaml')


@dataclass(frozen=True)
class ServoSpec:
    """One servo of the chain: ``id``, ``model`` (a key of the motor table), the ``joint``
    it drives and its Min/Max Position Limit [counts]."""

    id: int
    model: str
    joint: str
    position_limits: tuple[int, int]


@dataclass(frozen=True)
class BusConfig:
    """A servo chain: its servos, the bus's baud rate [bit/s], the Return Delay Time every
    servo starts with [2 us units] and the firmware version they report."""

    servos: tuple[ServoSpec, ...]
    baud_rate: int = 3_000_000
    return_delay_time: int = 0
    firmware_version: int = 46

    @classmethod
    def load(cls, path: str | Path = CRANE_X7_BUS) -> BusConfig:
        """Read a chain file (``crane_x7.yaml`` is the CRANE-X7's).

        Raises:
            ValueError: a missing key, or two servos with one ID.
        """
        import yaml

        data = yaml.safe_load(Path(path).read_text())
        try:
            servos = tuple(ServoSpec(int(s['id']), str(s['model']), str(s['joint']),
                                     (int(s['position_limits'][0]), int(s['position_limits'][1])))
                           for s in data['servos'])
            config = cls(servos, int(data['baud_rate']), int(data['return_delay_time']),
                         int(data['firmware_version']))
        except (KeyError, TypeError, IndexError) as err:
            raise ValueError(f'{path}: not a servo chain file ({err!r})') from err
        ids = [s.id for s in servos]
        if len(set(ids)) != len(ids):
            raise ValueError(f'{path}: servo IDs repeat: {ids}')
        return config
