"""Where each test file runs: one home per file, so each test runs where it can fail, once.

CI runs three suites, one per ROS 2 release the CRANE-X7 runs (docs/testing.md, "Where each
test runs"). A test earns a place in more than one only through what differs between them:

``core``
    No ROS API and no distribution's library version at stake: the engine, estimation,
    identification, the servo bus's codec and firmware, io, the docs. Runs once, in the
    Kilted suite (the newest libraries), with rclpy and the message packages made
    unimportable (``PLAG_TEST_HOME=core``, conftest.py): a core test that reaches ROS fails
    there and belongs to ``ros``.
``ros``
    rclpy, the message packages, nodes over DDS, the bag and launch files' ROS side: every
    suite (Kilted, Jazzy, Humble), since each release has its own rclpy and messages.
``floors``
    Code whose result rests on a library API that changed between Humble's floors
    (requirements/humble.txt: numpy 1.21, scipy 1.8, numba 0.55, matplotlib 3.5, PyYAML 5.4)
    and the newest releases, and has broken on the floors before: the compiled kernel, the
    filter design, the solvers, the report figures, the YAML files. Runs in the Kilted and
    the Humble suites.

``test_homes.py`` checks that every test file on disk has exactly one entry here.
"""
from __future__ import annotations

CORE, ROS, FLOORS = 'core', 'ros', 'floors'

# Files that run alone, after the parallel run of their suite (the `alone` marker): their
# figures are real time on the emulated servo bus, a 200 Hz driver against the servos' 100 ms
# Bus Watchdog, and a second pytest-xdist worker on the second core starves the bus process
# ("3 consecutive failed reads" at load 2-3). Their home is still one of the three.
ALONE = frozenset({'test_bus_driver.py', 'test_bus_sdk.py', 'test_driver_node.py',
                   'test_lab_install.py'})

# Which homes each suite runs (the Makefile's SUITE_MARKS say the same in pytest's words).
SUITES = {'kilted': (CORE, ROS, FLOORS), 'jazzy': (ROS,), 'humble': (ROS, FLOORS)}

HOMES: dict[str, str] = {
    'test_analysis.py': ROS,
    'test_api.py': ROS,
    'test_arm_ownership.py': CORE,
    'test_arrays.py': FLOORS,
    'test_bag.py': ROS,
    'test_bag_formats.py': FLOORS,
    'test_bag_recovery.py': ROS,
    'test_bag_writer.py': ROS,
    'test_bringup.py': ROS,
    'test_bus_driver.py': CORE,
    'test_bus_protocol.py': CORE,
    'test_bus_sdk.py': CORE,
    'test_bus_servo.py': CORE,
    'test_compact.py': CORE,
    'test_control.py': CORE,
    'test_crane_x7_driver.py': ROS,
    'test_demo.py': FLOORS,
    'test_dependencies.py': FLOORS,
    'test_doc_paths.py': ROS,
    'test_docs.py': ROS,
    'test_driver_bus_loop.py': ROS,
    'test_driver_node.py': ROS,
    'test_driver_safety.py': CORE,
    'test_dynamics.py': FLOORS,
    'test_dynamics_node.py': ROS,
    'test_emulated_controller_manager.py': ROS,
    'test_envelope.py': CORE,
    'test_excitation.py': FLOORS,
    'test_excite_live.py': ROS,
    'test_extension.py': CORE,
    'test_faults.py': ROS,
    'test_filters.py': FLOORS,
    'test_filters_velocity_source.py': CORE,
    'test_fleet.py': ROS,
    'test_friction.py': ROS,
    'test_fuzz.py': ROS,
    'test_identification.py': ROS,
    'test_identification_acceptance.py': ROS,
    'test_identification_terms.py': FLOORS,
    'test_identify_real.py': CORE,
    'test_homes.py': CORE,
    'test_impedance_node.py': ROS,
    'test_impedance_settings.py': CORE,
    'test_input_thread.py': ROS,
    'test_interfaces.py': ROS,
    'test_lab_install.py': ROS,
    'test_launch.py': ROS,
    'test_launch_arguments.py': ROS,
    'test_launch_live.py': ROS,
    'test_launch_view.py': ROS,
    'test_layers.py': CORE,
    'test_layouts.py': ROS,
    'test_live_report.py': CORE,
    'test_messages.py': ROS,
    'test_model.py': CORE,
    'test_model_parameters.py': ROS,
    'test_motors.py': CORE,
    'test_namespace.py': ROS,
    'test_no_torch.py': ROS,
    'test_node_settings.py': CORE,
    'test_npz.py': CORE,
    'test_options.py': CORE,
    'test_outputs.py': CORE,
    'test_parameter_choice.py': CORE,
    'test_plausibility.py': ROS,
    'test_rates.py': ROS,
    'test_rclpy_compat.py': ROS,
    'test_rclpy_humble_api.py': ROS,
    'test_real_arm_steps.py': ROS,
    'test_real_stack.py': ROS,
    'test_record_crash.py': ROS,
    'test_regressor.py': FLOORS,
    'test_replay.py': ROS,
    'test_ros2_control_distributions.py': ROS,
    'test_ros2_control_live.py': ROS,
    'test_ros_domains.py': ROS,
    'test_rviz_config.py': CORE,
    'test_shipped.py': CORE,
    'test_sim_node.py': ROS,
    'test_simulation.py': CORE,
    'test_robot_description.py': ROS,
    'test_spin_node.py': ROS,
    'test_stability.py': FLOORS,
    'test_study_branching.py': CORE,
    'test_study_coriolis.py': CORE,
    'test_study_cost_curve.py': CORE,
    'test_study_gravity.py': CORE,
    'test_study_pendulums.py': CORE,
    'test_study_three_link.py': CORE,
    'test_switch_parity.py': ROS,
    'test_table.py': CORE,
    'test_threads.py': FLOORS,
    'test_tuning.py': ROS,
    'test_urdf.py': CORE,
}
