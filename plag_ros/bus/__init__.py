"""The CRANE-X7's servo bus, emulated: Dynamixel Protocol 2.0 servos on the simulated arm.

``protocol`` (packets), ``control_table`` (the models' tables, from ``tables/``), ``servo``
(one servo's table and firmware), ``chain`` (the servos on one bus, faults for tests),
``arm`` (the chain driving the simulator's joints) and ``server`` (the bus on a
pseudo-terminal, where any Dynamixel client, ROBOTIS' SDK and the robot's own driver
included, finds it). Imports ``core`` only; no ROS.
"""
