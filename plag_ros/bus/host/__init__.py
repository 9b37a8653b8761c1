"""The host's side of the servo bus, what drives the real CRANE-X7: ``driver`` (one sync read
and one sync write a cycle through dynamixel-sdk, position or current mode per joint, the
faults and the position hold) and ``envelope`` (the bounds of current mode checked every
cycle). Never imports :mod:`plag_ros.bus.emulator`: what it knows of the servos is the
e-manual's, in the shared modules of :mod:`plag_ros.bus`.
"""
