"""What a joint is doing, from what the encoders say (imports :mod:`..dynamics`).

* :mod:`.filters`: five-point derivative on a sample grid plus a Butterworth low-pass,
  streaming (the nodes) and zero-phase (offline);
* :mod:`.plausibility`: limits a joint state must keep (positions, speeds, jumps);
* :mod:`.friction`: whether a still joint is stuck, sliding or unresolved.
"""
