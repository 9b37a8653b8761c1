"""Settings written once: a dataclass field that also describes itself as a user option.

A configuration dataclass of the core (:class:`~plag_ros.core.estimation.filters.EstimatorConfig`,
:class:`~plag_ros.core.estimation.plausibility.PlausibilityConfig`, a node's settings) declares
each field with :func:`option`: its default, a one-line description with the unit, its range and
whether it can change while running. Allowed values of a string come from the field's ``Literal``
annotation. :func:`options` lists those fields (nested dataclasses become dotted names,
``filter.cutoff_hz``) and :func:`build` makes an instance back from a flat ``{dotted name: value}``
mapping, so the ROS adapter declares node parameters and
reads them back without a table of its own: adding an option is one edit, here.

Nothing here imports ROS; :mod:`plag_ros.ros.parameters` maps an :class:`Option` to a
ROS parameter descriptor.
"""
from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ['Kind', 'Option', 'build', 'group', 'inline', 'option', 'options']

Kind = Literal['bool', 'int', 'float', 'str', 'floats', 'strs']
"""Value kinds an option can have (they map one to one onto ROS parameter types)."""

_META = 'plag_option'
_GROUP = 'plag_group'


def option(default: Any, doc: str, *, low: float | None = None, high: float | None = None,
           read_only: bool = False, kind: Kind | None = None) -> Any:
    """A dataclass field that is also a user option.

    Args:
        default: the default value; a list is copied for each instance.
        doc: one line for ``ros2 param describe``, with the unit in brackets.
        low, high: closed numeric range (both or neither).
        read_only: True when the value is only read at start.
        kind: the value kind where the default does not tell it (an empty list).
    """
    meta = {_META: {'doc': doc, 'low': low, 'high': high, 'read_only': read_only,
                    'kind': kind}}
    if isinstance(default, list):
        items = list(default)
        return dataclasses.field(default_factory=lambda: list(items), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def group(default: Any, *, read_only: bool | None = None,
          exclude: Sequence[str] = ()) -> Any:
    """A dataclass field holding nested settings: a settings dataclass or an instance.

    Its options get the field name as prefix, as those of any nested settings do. Here
    the outer settings may also say which inner options are none of theirs (``exclude``:
    a value they set themselves, or one their users never change) and override the inner
    fields' ``read_only`` flag (``read_only``: a group only read at start).
    """
    factory = default if isinstance(default, type) else (lambda: default)
    return dataclasses.field(default_factory=factory, metadata={
        _GROUP: {'read_only': read_only, 'exclude': tuple(exclude)}})


def inline(default: Any, *, read_only: bool | None = None,
           exclude: Sequence[str] = ()) -> Any:
    """Like :func:`group`, but the inner options keep their own names (no prefix): for a
    settings class whose fields are options of the outer one under their plain names (a
    node whose parameters predate the nesting)."""
    factory = default if isinstance(default, type) else (lambda: default)
    return dataclasses.field(default_factory=factory, metadata={
        _GROUP: {'read_only': read_only, 'exclude': tuple(exclude), 'inline': True}})


def _nested_prefix(field: dataclasses.Field, prefix: str) -> str:
    return prefix if field.metadata.get(_GROUP, {}).get('inline') else \
        f'{prefix}{field.name}.'


@dataclass(frozen=True)
class Option:
    """One user option: a leaf field of a settings dataclass.

    Attributes:
        name: dotted name (``'filter.cutoff_hz'``).
        default: value in the default instance (a list for the list kinds).
        doc: description, with the unit.
        kind: value kind.
        low, high: numeric range or None.
        choices: allowed strings (from the ``Literal`` annotation) or None.
        read_only: only read at start.
    """

    name: str
    default: Any
    doc: str
    kind: Kind
    low: float | None
    high: float | None
    choices: tuple[str, ...] | None
    read_only: bool


def _kind_of(value: Any, name: str) -> Kind:
    if isinstance(value, bool):
        return 'bool'
    if isinstance(value, int):
        return 'int'
    if isinstance(value, float):
        return 'float'
    if isinstance(value, str):
        return 'str'
    if isinstance(value, (list, tuple)) and value:
        if all(isinstance(v, str) for v in value):
            return 'strs'
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            return 'floats'
    raise TypeError(f'option {name}: cannot tell the kind of {value!r}; pass kind=')


def _as_list(value: Any) -> list:
    """A list option's value as a plain list; an array (a core dataclass freezes its
    lists into numpy arrays) gives Python numbers."""
    if hasattr(value, 'tolist'):
        value = value.tolist()
        return value if isinstance(value, list) else [value]
    return list(value)


def _choices(annotation: Any) -> tuple[str, ...] | None:
    if typing.get_origin(annotation) is Literal:
        return tuple(str(a) for a in typing.get_args(annotation))
    return None


def options(settings: Any, prefix: str = '', *, exclude: Sequence[str] = (),
            read_only: bool | None = None) -> list[Option]:
    """The options of a settings instance (its values are the defaults), depth first.

    Fields declared without :func:`option` are not options, except nested settings
    dataclasses, whose options get the field name as prefix. ``exclude`` lists dotted
    names (without ``prefix``) to leave out: a value the caller sets itself.
    ``read_only`` overrides the fields' own flag for all of them (a node that reads a
    shared settings class only at start).
    """
    hints = typing.get_type_hints(type(settings))
    out: list[Option] = []
    for field in dataclasses.fields(settings):
        value = getattr(settings, field.name)
        if field.name in exclude:
            continue
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            own = field.metadata.get(_GROUP, {})
            inner = [e.split('.', 1)[1] for e in exclude if e.startswith(field.name + '.')]
            inner += own.get('exclude', ())
            out += options(value, _nested_prefix(field, prefix), exclude=inner,
                           read_only=own.get('read_only') if read_only is None else read_only)
            continue
        meta = field.metadata.get(_META)
        if meta is None:
            continue
        name = prefix + field.name
        kind = meta['kind'] or _kind_of(value, name)
        default = _as_list(value) if kind in ('floats', 'strs') else value
        out.append(Option(name, default, meta['doc'], kind, meta['low'], meta['high'],
                          _choices(hints[field.name]),
                          meta['read_only'] if read_only is None else read_only))
    return out


def _convert(opt: Option, value: Any) -> Any:
    if opt.kind == 'bool':
        return bool(value)
    if opt.kind in ('int', 'float'):
        number = int(value) if opt.kind == 'int' else float(value)
        # The range a ROS descriptor enforces, enforced for every other caller too.
        if opt.low is not None and opt.high is not None and \
                not opt.low <= number <= opt.high:
            raise ValueError(f'must be in [{opt.low:g}, {opt.high:g}], got {number!r}')
        return number
    if opt.kind == 'str':
        value = str(value)
        if opt.choices is not None and value not in opt.choices:
            raise ValueError(f'must be one of {list(opt.choices)}, got {value!r}')
        return value
    if opt.kind == 'floats':
        return [float(v) for v in value]
    return [str(v) for v in value]


def build(cls: type, values: Mapping[str, Any], prefix: str = '', *,
          base: Any = None) -> Any:
    """An instance of ``cls`` from ``{dotted name: value}``; absent names keep ``base``'s.

    ``base`` (default ``cls()``) supplies the values of fields that are not options or
    not in ``values``. Values are converted to the option's kind; a string outside its
    ``Literal`` or a number outside the option's range raises here, every other check is
    the dataclass's own ``__post_init__``.

    Raises:
        ValueError, TypeError: a value the settings refuse; the message names it.
    """
    base = cls() if base is None else base
    changes: dict[str, Any] = {}
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        current = getattr(base, field.name)
        if dataclasses.is_dataclass(current) and not isinstance(current, type):
            changes[field.name] = build(type(current), values,
                                        _nested_prefix(field, prefix), base=current)
            continue
        name = prefix + field.name
        meta = field.metadata.get(_META)
        if meta is None or name not in values:
            continue
        kind = meta['kind'] or _kind_of(current, name)
        opt = Option(name, current, meta['doc'], kind, meta['low'], meta['high'],
                     _choices(hints[field.name]), meta['read_only'])
        try:
            changes[field.name] = _convert(opt, values[name])
        except (TypeError, ValueError) as err:
            raise ValueError(f'parameter {name}: {err}') from err
    try:
        return dataclasses.replace(base, **changes)
    except (TypeError, ValueError) as err:
        raise ValueError(f'{prefix.rstrip(".") or cls.__name__}: {err}') from err
