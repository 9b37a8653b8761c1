"""String parameters with a fixed set of values are refused, naming the parameter, outside it."""
from __future__ import annotations

import pytest

from plag_ros.core.control.settings import IMPEDANCE_OPTIONS, ImpedanceSettings
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path


@pytest.mark.parametrize('name', ['motion_source', 'command_interface', 'fault_action',
                                  'filter.velocity_source', 'gain_check', 'reference.mode',
                                  'command.type', 'switch.method'])
def test_impedance_settings_reject_an_unknown_choice(name):
    model = RobotModel.from_urdf(default_urdf_path())
    values = {opt.name: opt.default for opt in IMPEDANCE_OPTIONS}
    ImpedanceSettings.from_values(values).controller_config(model)   # the defaults are valid
    values[name] = 'sideways'
    with pytest.raises(ValueError, match=f'parameter {name}: must be one of'):
        ImpedanceSettings.from_values(values)
