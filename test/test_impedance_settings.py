"""The settings behind the impedance node's parameters (no ROS needed).

Every parameter of ``plag_impedance`` is one option of :class:`ImpedanceSettings`: these
tests hold the options to their contract (documented, valid defaults, refused bad values
naming the parameter), config/impedance.yaml to the options it sets, and the conversion
into the controller's settings to values written out here.
"""
from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest
from parameter_files import node_parameters

from plag_ros.core.common.options import build, options
from plag_ros.core.control.config import ImpedanceConfig
from plag_ros.core.control.references import HoldReference, SineReference
from plag_ros.core.control.settings import (
    EFFORT_CONTROLLER,
    IMPEDANCE_OPTIONS,
    ImpedanceSettings,
)
from plag_ros.core.dynamics import motors
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path

DEFAULTS = {opt.name: opt.default for opt in IMPEDANCE_OPTIONS}
RANGED = [opt for opt in IMPEDANCE_OPTIONS if opt.low is not None]
CHOICES = [opt for opt in IMPEDANCE_OPTIONS if opt.choices is not None]


@pytest.fixture(scope='module')
def model() -> RobotModel:
    return RobotModel.from_urdf(default_urdf_path())


def test_names_are_unique_and_the_filter_rate_is_no_parameter():
    names = [opt.name for opt in IMPEDANCE_OPTIONS]
    assert len(names) == len(set(names))
    assert 'rate_hz' in names and 'filter.rate_hz' not in names


@pytest.mark.parametrize('opt', IMPEDANCE_OPTIONS, ids=lambda opt: opt.name)
def test_every_option_is_described_and_its_default_validates(opt):
    assert opt.doc.strip(), opt.name
    if opt.low is not None:
        assert opt.low <= opt.default <= opt.high
    if opt.choices is not None:
        assert opt.default in opt.choices
    assert ImpedanceSettings.from_values({opt.name: opt.default}) == ImpedanceSettings()


def test_building_the_defaults_gives_the_defaults(model):
    assert build(ImpedanceSettings, DEFAULTS) == ImpedanceSettings()
    assert ImpedanceSettings.from_values(DEFAULTS) == ImpedanceSettings()
    ImpedanceSettings().controller_config(model)


@pytest.mark.parametrize('opt', CHOICES, ids=lambda opt: opt.name)
def test_a_wrong_choice_is_refused_naming_the_parameter(opt):
    with pytest.raises(ValueError, match=rf'parameter {re.escape(opt.name)}: must be one of'):
        ImpedanceSettings.from_values({opt.name: 'sideways'})


@pytest.mark.parametrize('opt', RANGED, ids=lambda opt: opt.name)
def test_a_value_out_of_range_is_refused_naming_the_parameter(opt):
    for bad in (opt.low - 1, opt.high + 1):
        with pytest.raises(ValueError, match=rf'parameter {re.escape(opt.name)}: must be in'):
            ImpedanceSettings.from_values({opt.name: bad})


def test_the_yaml_sets_known_options_only_and_builds():
    flat = node_parameters('impedance.yaml', 'plag_impedance')
    assert set(flat) <= set(DEFAULTS), sorted(set(flat) - set(DEFAULTS))
    assert ImpedanceSettings.from_values(flat) == ImpedanceSettings()


def test_read_only_flags():
    """What may change while the node runs; written out, not derived from the options."""
    runtime = {'switch.hold_s', 'fault.tracking_error', 'fault.effort_error',
               'fault.persist_s', 'fault.saturation_travel', 'stale_periods', 'input_loss_s',
               'ramp_s', 'fault_action',
               'resume_after_fault', 'gravity_compensation', 'stiffness', 'damping',
               'inertia', 'servo_stiffness', 'max_position_step', 'effort_scale',
               'motion_source', 'compensate.acceleration', 'compensate.velocity',
               'compensate.bodies', 'reference.mode', 'reference.amplitude',
               'reference.frequency_hz', 'reference.max_velocity',
               'reference.max_acceleration', 'delay_periods',
               'oscillation.reversals', 'oscillation.window_s', 'state_rate_hz'}
    assert {opt.name for opt in IMPEDANCE_OPTIONS if not opt.read_only} == runtime


def test_reference_slew_limits_are_per_joint_and_positive(model):
    config = ImpedanceSettings.from_values({
        'reference.max_velocity': [0.5, 1, 1, 2, 1, 1, 1, 1]}).controller_config(model)
    np.testing.assert_array_equal(config.reference_max_velocity, [0.5, 1, 1, 2, 1, 1, 1, 1])
    assert config.reference_max_acceleration == 4.0
    for name in ('reference.max_velocity', 'reference.max_acceleration'):
        with pytest.raises(ValueError, match=name.replace('reference.', '')):
            ImpedanceSettings.from_values({name: [0.0]}).controller_config(model)


def test_controller_config_of_the_defaults(model):
    config = ImpedanceSettings().controller_config(model)
    np.testing.assert_array_equal(config.stiffness, [10.0, 20.0, 10.0, 10.0, 4.0, 4.0, 2.0,
                                                     1.0])
    assert float(config.inertia) == 0.0 and float(config.max_position_step) == 0.02
    # K_s: 0 takes the motor table's (the e-manual's stall torques at the P gain 800)
    assert float(config.servo_stiffness) == 0.0
    np.testing.assert_allclose(config.servo_stiffness_of(model.actuated_names),
                               [18.88, 48.8] + [18.88] * 6, atol=0.005)
    assert config.fault.limit('tracking_error') == 0.3
    assert config.fault.limit('effort_error') == 1.5
    assert config.command_interface == 'position' and config.motion_source == 'measured'
    # The 7 arm joints are commanded and monitored, the gripper finger is not.
    assert config.monitored.tolist() == [True] * 7 + [False]
    assert (config.estimator.cutoff_hz, config.estimator.order) == (10.0, 2)
    assert config.estimator.velocity_source == 'measured'
    assert config.estimator.rate_hz == 200.0
    # One path selected: the elbow's acceleration and velocity into the shoulder tilt.
    tilt, elbow = model.joint_index(['crane_x7_shoulder_revolute_part_tilt_joint',
                                     'crane_x7_upper_arm_revolute_part_rotate_joint'])
    for mask in (config.acceleration_mask, config.velocity_mask):
        assert np.flatnonzero(mask).tolist() == [tilt * model.n_joints + elbow]


def test_a_limit_of_zero_or_less_turns_a_fault_check_off(model):
    s = ImpedanceSettings.from_values({'fault.tracking_error': 0.0,
                                       'fault.effort_error': -1.0})
    config = s.controller_config(model)
    assert math.isinf(config.fault.limit('tracking_error'))
    assert math.isinf(config.fault.limit('effort_error'))


def test_the_library_and_the_node_share_one_definition_and_one_default():
    """Every controller option is the node's parameter of the same name, with the same
    description, range and default; only the CRANE-X7's spring and damper differ from the
    library's none (issue: ImpedanceConfig and the node's settings had drifted apart:
    stale_periods 3 vs 5, ramp_s 1 vs 2, command_interface 'effort' vs 'position')."""
    node = {opt.name: opt for opt in IMPEDANCE_OPTIONS}
    library = options(ImpedanceConfig(), exclude=('estimator',))   # the node's filter.*
    assert len(library) == 23
    differ = []
    for opt in library:
        assert node[opt.name].doc == opt.doc and node[opt.name].kind == opt.kind
        assert (node[opt.name].low, node[opt.name].high) == (opt.low, opt.high)
        if node[opt.name].default != opt.default:
            differ.append(opt.name)
    assert differ == ['stiffness', 'damping']
    config = ImpedanceConfig()
    assert (config.stale_periods, config.ramp_s, config.command_interface) == \
        (DEFAULTS['stale_periods'], DEFAULTS['ramp_s'], DEFAULTS['command_interface']) == \
        (5.0, 2.0, 'position')
    # what the node adds beside the options: the fields ImpedanceConfig leaves to its caller
    derived = {f.name for f in dataclasses.fields(ImpedanceConfig)} - {
        opt.name.split('.')[0] for opt in library}
    assert derived == {'acceleration_mask', 'velocity_mask', 'armature', 'monitored',
                       'estimator', 'reference_max_velocity', 'reference_max_acceleration'}


def test_the_filter_follows_rate_hz():
    assert ImpedanceSettings.from_values({'rate_hz': 1000.0}).filter.rate_hz == 1000.0
    # 150 Hz is above half of the default 200 Hz: admitted together with the higher rate.
    s = ImpedanceSettings.from_values({'rate_hz': 1000.0, 'filter.cutoff_hz': 150.0})
    assert (s.filter.rate_hz, s.filter.cutoff_hz) == (1000.0, 150.0)
    with pytest.raises(ValueError, match='cutoff_hz'):
        ImpedanceSettings.from_values({'filter.cutoff_hz': 150.0})


def test_per_joint_errors_name_the_parameter(model):
    with pytest.raises(ValueError, match='damping: empty per-joint list'):
        ImpedanceSettings.from_values({'damping': []})
    with pytest.raises(ValueError, match='stiffness must be >= 0'):
        ImpedanceSettings.from_values({'stiffness': [-1.0]}).controller_config(model)
    with pytest.raises(ValueError, match=r'compensate\.velocity: .*nope'):
        ImpedanceSettings.from_values(
            {'compensate.velocity': ['nope<-*']}).controller_config(model)
    with pytest.raises(ValueError, match=r'command\.joints'):
        ImpedanceSettings.from_values(
            {'command.joints': ['crane_x7_wrist_joint'] * 2}).command_joints(model)


def test_reference_trajectory():
    assert isinstance(ImpedanceSettings().reference_trajectory(8), HoldReference)
    sine = ImpedanceSettings.from_values({
        'reference.mode': 'sine', 'reference.amplitude': [0.0, 0.0, 0.0, 0.4, 0, 0, 0, 0],
        'reference.frequency_hz': [0.5]}).reference_trajectory(8)
    assert isinstance(sine, SineReference)
    with pytest.raises(ValueError, match='reference.frequency_hz'):
        ImpedanceSettings.from_values({'reference.mode': 'sine',
                                       'reference.frequency_hz': [-1.0]}
                                      ).reference_trajectory(8)
    with pytest.raises(ValueError, match='reference.amplitude'):
        ImpedanceSettings.from_values({'reference.mode': 'sine',
                                       'reference.amplitude': [0.1, 0.2]}
                                      ).reference_trajectory(8)


def test_command_path_defaults():
    s = ImpedanceSettings()
    # relative: in the node's namespace (/plag_arm_position_controller/commands in the root)
    assert (s.command_kind, s.command_topic, s.target_controller) == (
        'forward', 'plag_arm_position_controller/commands', 'plag_arm_position_controller')
    t = ImpedanceSettings.from_values({'command.type': 'trajectory'})
    assert (t.command_kind, t.command_topic, t.target_controller) == (
        'trajectory', 'crane_x7_arm_controller/joint_trajectory', 'crane_x7_arm_controller')
    e = ImpedanceSettings.from_values({'command_interface': 'effort'})
    assert (e.command_kind, e.command_topic) == ('effort', 'effort_controller/commands')
    assert s.command.joints == list(motors.ARM_JOINTS)


@pytest.mark.parametrize('values', [
    {'switch.fallback': 'plag_arm_position_controller'},
    {'command.controller': 'my_position_controller', 'switch.fallback': 'my_position_controller'},
    {'command_interface': 'effort', 'switch.method': 'driver', 'resume_after_fault': False,
     'command.controller': 'my_effort_controller', 'switch.fallback': 'my_effort_controller'}],
    ids=['forward_default', 'forward_named', 'torque_mode_named'])
def test_the_fallback_is_not_the_controller_the_commands_go_to(values):
    """A switching path whose switch.fallback is its own target controller is refused: its
    hand-back would switch that controller in again, and a message that tells the operator
    how to hand back by hand would name it. The paths that do not switch keep theirs."""
    with pytest.raises(ValueError, match='switch.fallback: .* is the controller the commands'):
        ImpedanceSettings.from_values(values)
    assert ImpedanceSettings.from_values({**values, 'switch.method': 'none',
                                          'resume_after_fault': True})


def test_torque_mode_never_takes_the_arm_on_its_own_nor_runs_refused_gains():
    """Effort through plag_driver with resume_after_fault, start_enabled, a gain_check
    other than 'refuse', freshness judged by arrival (use_header_stamp false: a backlog
    read late would pass for fresh, and the command would carry its arrival as its stamp)
    or the effort controller as switch.fallback is refused, naming the parameter; the
    shipped torque-mode file sets them so, the other paths keep theirs."""
    torque = {'command_interface': 'effort', 'switch.method': 'driver',
              'resume_after_fault': False}
    for name, value in (('resume_after_fault', True), ('start_enabled', True),
                        ('gain_check', 'warn'), ('gain_check', 'off'),
                        ('use_header_stamp', False)):
        with pytest.raises(ValueError, match=f'{name}: torque mode'):
            ImpedanceSettings.from_values({**torque, name: value})
    # nor hands the arm back to current mode
    with pytest.raises(ValueError, match="switch.fallback: .*driver's position hold"):
        ImpedanceSettings.from_values({**torque, 'switch.fallback': EFFORT_CONTROLLER})
    assert not ImpedanceSettings.from_values(torque).control.resume_after_fault
    shipped = node_parameters('torque_mode.yaml', 'plag_impedance')
    assert shipped['resume_after_fault'] is False
    assert not ImpedanceSettings.from_values(shipped).control.resume_after_fault
    effort = ImpedanceSettings.from_values({'command_interface': 'effort',
                                            'resume_after_fault': True})
    assert effort.control.resume_after_fault
