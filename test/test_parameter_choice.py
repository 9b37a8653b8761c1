"""String parameters with a fixed set of values are checked where the node reads them."""
from __future__ import annotations

import pytest

from plag_ros.core.model import RobotModel, default_urdf_path
from plag_ros.ros.nodes.impedance_node import PARAMETERS, controller_config
from plag_ros.ros.parameters import choice


def test_choice_returns_the_allowed_value():
    assert choice({'mode': 'hold'}, 'mode', ('hold', 'zero')) == 'hold'
    assert choice({'mode': 'zero'}, 'mode', ('hold', 'zero')) == 'zero'


@pytest.mark.parametrize('value', ['', 'Hold', 'hold ', 'none'])
def test_choice_names_the_parameter_on_other_values(value):
    with pytest.raises(ValueError, match=r"parameter mode must be one of \['hold', 'zero'\]"):
        choice({'mode': value}, 'mode', ('hold', 'zero'))


@pytest.mark.parametrize('name', ['motion_source', 'command_interface', 'fault_action',
                                  'filter.velocity_source'])
def test_impedance_config_rejects_an_unknown_choice(name):
    model = RobotModel.from_urdf(default_urdf_path())
    values = {key: default for key, (default, _) in PARAMETERS.items()}
    controller_config(model, values)        # the defaults are valid
    values[name] = 'sideways'
    with pytest.raises(ValueError, match=f'parameter {name} must be one of'):
        controller_config(model, values)
