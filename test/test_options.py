"""core.options: a settings dataclass lists its fields as options and is built back from them.

Checked on small settings written here, independent of any node: names (nested, grouped,
inline), kinds, choices from ``Literal``, ranges, defaults copied per instance, and the
errors naming the option.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import pytest

from plag_ros.core.common.options import build, group, inline, option, options


@dataclass(frozen=True)
class Inner:
    gain: float = option(2.0, 'a gain [1]', low=0.0, high=10.0)
    mode: Literal['a', 'b'] = option('a', 'a mode')
    hidden: int = 7                                      # not an option

    def __post_init__(self) -> None:
        if self.gain == 3.0:
            raise ValueError('Inner.gain must not be 3')


@dataclass(frozen=True)
class Outer:
    rate_hz: float = option(200.0, 'rate [Hz]', low=1.0, high=1e4, read_only=True)
    names: list = option(['x', 'y'], 'names')
    weights: list = option([], 'weights [1]', kind='floats')
    inner: Inner = group(Inner, read_only=True, exclude=('mode',))
    flat: Inner = inline(Inner(gain=5.0))
    plain: Inner = Inner()                               # nested without group(): prefixed


def by_name():
    return {o.name: o for o in options(Outer())}


def test_names_kinds_and_defaults():
    opts = by_name()
    assert list(opts) == ['rate_hz', 'names', 'weights', 'inner.gain', 'gain', 'mode',
                          'plain.gain', 'plain.mode']
    assert [opts[n].kind for n in opts] == ['float', 'strs', 'floats', 'float', 'float',
                                            'str', 'float', 'str']
    assert opts['gain'].default == 5.0 and opts['inner.gain'].default == 2.0
    assert opts['mode'].choices == ('a', 'b') and opts['rate_hz'].choices is None
    assert (opts['rate_hz'].low, opts['rate_hz'].high) == (1.0, 1e4)


def test_read_only_follows_the_group_and_the_caller():
    opts = by_name()
    assert opts['rate_hz'].read_only and opts['inner.gain'].read_only
    assert not opts['gain'].read_only and not opts['plain.gain'].read_only
    assert all(o.read_only for o in options(Outer(), read_only=True))
    assert [o.name for o in options(Outer(), 'node.', exclude=('rate_hz', 'plain.mode'))][:3] \
        == ['node.names', 'node.weights', 'node.inner.gain']


def test_list_defaults_are_copied_per_instance():
    a, b = Outer(), Outer()
    a.names.append('z')
    assert b.names == ['x', 'y'] and by_name()['names'].default == ['x', 'y']


def test_build_round_trips_and_converts():
    assert build(Outer, {o.name: o.default for o in options(Outer())}) == Outer()
    built = build(Outer, {'rate_hz': 100, 'inner.gain': 1, 'gain': 4, 'plain.mode': 'b',
                          'weights': (1, 2)})
    assert built.rate_hz == 100.0 and isinstance(built.rate_hz, float)
    assert built.inner.gain == 1.0 and built.flat.gain == 4.0 and built.plain.mode == 'b'
    assert built.weights == [1.0, 2.0] and built.inner.hidden == 7


@pytest.mark.parametrize('values,message', [
    ({'plain.mode': 'c'}, r"parameter plain\.mode: must be one of \['a', 'b'\], got 'c'"),
    ({'rate_hz': 0.5}, r'parameter rate_hz: must be in \[1, 10000\], got 0\.5'),
    ({'inner.gain': 3.0}, r'inner: Inner\.gain must not be 3'),
])
def test_build_errors_name_the_option(values, message):
    with pytest.raises(ValueError, match=message):
        build(Outer, values)


def test_a_default_of_unknown_kind_is_refused():
    @dataclass(frozen=True)
    class Bad:
        empty: list = option([], 'no kind given')

    with pytest.raises(TypeError, match='option empty: cannot tell the kind'):
        options(Bad())
