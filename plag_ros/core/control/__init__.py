"""The partial-impedance controller (imports :mod:`..dynamics`, :mod:`..estimation`).

* :mod:`.config`: its configuration and the propagation masks;
* :mod:`.references`: desired trajectories;
* :mod:`.impedance`: the law with its limits, hold, watchdog and servo monitor;
* :mod:`.stability`: the sampled loop's stable gains; :mod:`.oscillation`: the monitor
  for a loop gone unstable;
* :mod:`.settings`: the impedance node's options; :mod:`.arm_ownership`: who commands
  the arm.
"""
