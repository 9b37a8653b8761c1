"""The settings behind the dynamics and simulator nodes' parameters (no ROS needed).

Each parameter is one option of :class:`DynamicsSettings` or :class:`SimSettings`; these
tests hold the options to their contract (documented, valid defaults, refused bad values
naming the parameter) and the parameter files in config/ to the options they set.
"""
from __future__ import annotations

import pytest
from parameter_files import node_parameters

from plag_ros.core.common.options import Option, build
from plag_ros.core.decomposition.settings import DynamicsSettings, dynamics_options
from plag_ros.core.simulation.settings import SimSettings, sim_options

NODES = {   # settings class, its options, parameter file, node name in that file
    'dynamics': (DynamicsSettings, dynamics_options(), 'crane_x7.yaml', 'plag_dynamics'),
    'sim': (SimSettings, sim_options(), 'sim.yaml', 'plag_sim'),
}

# What may change while each node runs; everything else is read at start. Written out
# here (not derived from the options) so that a flag flipped by mistake fails.
RUNTIME = {
    'dynamics': {'filter.cutoff_hz', 'filter.order', 'filter.rate_hz', 'filter.gap_periods',
                 'filter.velocity_source', 'filter.min_spacing_periods',
                 'filter.stencil_nodes', 'stamp_source', 'output_rate_hz',
                 'visualization_rate_hz', 'marker_scale', 'image_cell', 'image_limit',
                 'publish_bodies'},
    'sim': {'position_p_gain', 'active_arm_controller', 'effort_timeout'},
}

_KINDS = {'bool': (bool,), 'int': (int,), 'float': (float,), 'str': (str,)}


def _all_options() -> list[tuple[str, Option]]:
    return [(node, opt) for node, (_, opts, _, _) in NODES.items() for opt in opts]


@pytest.mark.parametrize('node', NODES)
def test_option_names_are_unique_and_read_only_flags_as_documented(node):
    opts = NODES[node][1]
    names = [opt.name for opt in opts]
    assert len(names) == len(set(names))
    assert {opt.name for opt in opts if not opt.read_only} == RUNTIME[node]


@pytest.mark.parametrize('node, opt', _all_options(), ids=lambda x: getattr(x, 'name', x))
def test_every_option_is_described_and_its_default_valid(node, opt):
    assert opt.doc.strip() and opt.doc == opt.doc.strip(), opt.name
    if opt.kind in _KINDS:
        assert type(opt.default) in _KINDS[opt.kind], opt.name
    else:
        item = float if opt.kind == 'floats' else str
        assert opt.default and all(type(v) is item for v in opt.default), opt.name
    if opt.low is not None or opt.high is not None:
        assert opt.kind in ('int', 'float') and opt.low is not None and opt.high is not None
        assert opt.low <= opt.default <= opt.high, opt.name
    if opt.choices is not None:
        assert opt.kind == 'str' and opt.default in opt.choices, opt.name


@pytest.mark.parametrize('node', NODES)
def test_building_from_the_defaults_gives_the_defaults(node):
    cls, opts, _, _ = NODES[node]
    built = build(cls, {opt.name: opt.default for opt in opts})
    assert built == cls()


@pytest.mark.parametrize('node, opt', [(n, o) for n, o in _all_options()
                                       if o.choices is not None],
                         ids=lambda x: getattr(x, 'name', x))
def test_a_wrong_choice_is_refused_naming_the_parameter(node, opt):
    cls = NODES[node][0]
    with pytest.raises(ValueError, match=opt.name.replace('.', r'\.')):
        build(cls, {opt.name: 'no_such_choice'})


@pytest.mark.parametrize('node, opt', [(n, o) for n, o in _all_options()
                                       if o.high is not None],
                         ids=lambda x: getattr(x, 'name', x))
def test_an_out_of_range_value_is_refused_naming_the_parameter(node, opt):
    cls = NODES[node][0]
    above = opt.high + 1 if opt.kind == 'int' else opt.high * 2.0 + 1.0
    with pytest.raises(ValueError, match=opt.name.replace('.', r'\.')):
        build(cls, {opt.name: above})


def test_inconsistent_values_are_refused_naming_the_parameter():
    with pytest.raises(ValueError, match='cutoff_hz'):
        build(DynamicsSettings, {'filter.cutoff_hz': 150.0})   # above 200 Hz / 2
    with pytest.raises(ValueError, match='robot_description is empty'):
        build(DynamicsSettings, {'robot_description_source': 'parameter'})
    with pytest.raises(ValueError, match='urdf_path'):
        build(DynamicsSettings, {'urdf_path': '/nonexistent/arm.urdf'})
    with pytest.raises(ValueError, match='publish_rate_hz'):
        build(SimSettings, {'publish_rate_hz': 2000.0})
    with pytest.raises(ValueError, match='kd'):
        build(SimSettings, {'kd': [-1.0]})


@pytest.mark.parametrize('node', NODES)
def test_every_key_of_the_parameter_file_is_an_option(node):
    cls, opts, file, name = NODES[node]
    values = node_parameters(file, name)
    assert values
    assert set(values) <= {opt.name for opt in opts}
    build(cls, values)    # and the file's values are valid


def test_the_simulator_file_repeats_the_defaults():
    """config/sim.yaml says its values are the node's defaults: it lists them all."""
    values = node_parameters('sim.yaml', 'plag_sim')
    assert values == {opt.name: opt.default for opt in sim_options()}


def test_the_simulator_config_follows_the_settings():
    settings = build(SimSettings, {'physics_rate_hz': 500.0, 'kp': [3.0], 'kd': [0.0],
                                   'position_p_gain': 5.0, 'friction': False})
    config = settings.simulator_config()
    assert config.dt == pytest.approx(1.0 / 500.0)
    assert (config.kp, config.kd, config.p_gain) == (3.0, None, 5.0)
    assert not config.friction and config.quantize_position and config.quantize_velocity
