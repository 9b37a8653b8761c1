"""The CRANE-X7's servo bus, both sides of the wire, in two rooms that share the wire's facts.

* Shared: ``protocol`` (Dynamixel Protocol 2.0 packets), ``control_table`` (the models'
  tables, from ``tables/``, and the units of their items), ``chain_file`` (which servo
  drives which joint, ``crane_x7.yaml``).
* :mod:`plag_ros.bus.host`: the host's side, what runs on the real arm: the torque-mode
  driver through ROBOTIS' dynamixel-sdk and the envelope of current mode.
* :mod:`plag_ros.bus.emulator`: the servos' side, emulated: each servo's table and
  firmware, the chain with its faults for tests, the simulated arm they drive and the bus on
  a pseudo-terminal, where any Dynamixel client (ROBOTIS' SDK, the robot's own driver, the
  host side above) finds it.

The two rooms never import each other (``test/test_layers.py``). Imports ``core`` only; no
ROS.
"""
