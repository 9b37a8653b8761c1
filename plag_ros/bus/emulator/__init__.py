"""The servos' side of the bus, emulated: ``servo`` (one servo's control table and firmware),
``chain`` (the servos on one bus, the broadcast and status rules, faults for tests), ``arm``
(the chain driving the simulated CRANE-X7, or an arm unlike the model) and ``server`` (the
bus on a pseudo-terminal, in real time or in lockstep). Never imports
:mod:`plag_ros.bus.host`: any client, ours included, reaches it only through the wire.
"""
