"""Control tables of the Dynamixel X servos of the CRANE-X7, read from data files.

One :class:`ControlTable` per model (``tables/<model>.yaml``: address, size, name, access,
initial value, range and sign of every item, with the e-manual page and commit they were
read from). The Indirect Address and Indirect Data blocks are not listed there: they follow
one rule, made here (e-manual, the model pages' "Indirect Address, Indirect Data": slot n
of 1-28 has its address at 168 + 2 (n - 1) and its data byte at 224 + (n - 1), slot n of
29-56 at 578 + 2 (n - 29) and 634 + (n - 29); an address slot holds a RAM address 64-661
and initially points at its own data byte).

Addresses 0-63 are EEPROM (writable only with the torque off), 64 and above RAM. The units
of the items both sides of the bus convert (e-manual, each item's "Unit") are here too.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

__all__ = ['CURRENT_UNIT', 'EEPROM_END', 'HOME_COUNT', 'INDIRECT_BLOCKS',
           'PROFILE_ACCELERATION_UNIT', 'RETURN_DELAY_UNIT', 'TABLE_END', 'VELOCITY_UNIT',
           'WATCHDOG_UNIT', 'ControlTable', 'Item', 'load']

EEPROM_END = 64
"""First RAM address."""
TABLE_END = 662
"""One past the last address (Indirect Data 56 at 661)."""
INDIRECT_BLOCKS = ((168, 224, 28), (578, 634, 28))
"""(first address slot, first data byte, slots) of the two indirect blocks."""
HOME_COUNT = 2048
"""Present Position at the joint's zero (the CRANE-X7 driver decodes ``(count - 2048) *
pi / 2048``)."""
CURRENT_UNIT = 2.69e-3
"""Present/Goal Current and Current Limit [A per unit]."""
VELOCITY_UNIT = 0.229 * 2.0 * math.pi / 60.0
"""Present Velocity and Profile Velocity [rad/s per unit] (0.229 rev/min)."""
PROFILE_ACCELERATION_UNIT = 214.577 * 2.0 * math.pi / 3600.0
"""Profile Acceleration [rad/s^2 per unit] (214.577 rev/min^2)."""
WATCHDOG_UNIT = 0.020
"""Bus Watchdog [s per unit]."""
RETURN_DELAY_UNIT = 2e-6
"""Return Delay Time [s per unit]."""
_TABLES = Path(__file__).with_name('tables')
MODEL_FILES = {'XM430-W350': 'xm430_w350.yaml', 'XM540-W270': 'xm540_w270.yaml'}


@dataclass(frozen=True)
class Item:
    """One control table item.

    Attributes:
        address, size: first byte and length [bytes].
        name: the e-manual's name.
        writable: RW (else read only).
        initial: value at power-on; None where the firmware sets it.
        low, high: inclusive range for writes: a number, the name of the item whose value
            bounds it (``'-Current Limit'`` for minus that value), or None (no check).
        signed: two's complement.
    """

    address: int
    size: int
    name: str
    writable: bool
    initial: int | None
    low: int | str | None
    high: int | str | None
    signed: bool

    @property
    def eeprom(self) -> bool:
        return self.address < EEPROM_END

    @property
    def end(self) -> int:
        return self.address + self.size


@dataclass(frozen=True)
class ControlTable:
    """The items of one servo model.

    Attributes:
        model: e.g. ``'XM430-W350'``. model_number: what a ping answers (1020, 1120).
        items: every item, indirect ones included, by address.
    """

    model: str
    model_number: int
    items: tuple[Item, ...]

    def __post_init__(self) -> None:
        owner: list[Item | None] = [None] * TABLE_END
        for item in self.items:
            for a in range(item.address, item.end):
                if owner[a] is not None:
                    raise ValueError(f'{self.model}: {item.name} overlaps {owner[a]}')
                owner[a] = item
        object.__setattr__(self, '_owner', tuple(owner))
        object.__setattr__(self, '_by_name', {i.name: i for i in self.items})

    def at(self, address: int) -> Item | None:
        """The item holding byte ``address`` (None in a gap or past the table)."""
        return self._owner[address] if 0 <= address < TABLE_END else None  # type: ignore[attr-defined]

    def __getitem__(self, name: str) -> Item:
        return self._by_name[name]  # type: ignore[attr-defined]


def _indirect_items() -> list[Item]:
    items = []
    for first_address, first_data, slots in INDIRECT_BLOCKS:
        start = 1 if first_address == 168 else 29
        for k in range(slots):
            n = start + k
            items.append(Item(first_address + 2 * k, 2, f'Indirect Address {n}', True,
                              first_data + k, 64, TABLE_END - 1, False))
            items.append(Item(first_data + k, 1, f'Indirect Data {n}', True, 0, 0, 255, False))
    return items


@cache
def load(model: str) -> ControlTable:
    """The control table of ``model`` (``'XM430-W350'`` or ``'XM540-W270'``).

    Raises:
        KeyError: a model without a table.
    """
    try:
        path = _TABLES / MODEL_FILES[model]
    except KeyError as err:
        raise KeyError(f'no control table for {model!r}; known: {sorted(MODEL_FILES)}'
                       ) from err
    data = yaml.safe_load(path.read_text())
    items = [Item(a, s, n, acc == 'RW', ini, lo, hi, sg)
             for a, s, n, acc, ini, lo, hi, sg in data['items']]
    return ControlTable(data['model'], int(data['model_number']),
                        tuple(sorted(items + _indirect_items(), key=lambda i: i.address)))
