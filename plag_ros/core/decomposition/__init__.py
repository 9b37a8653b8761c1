"""Recorded or live motion turned into torques, partial torques and propagation paths
(imports :mod:`..dynamics`, :mod:`..estimation`).

* :mod:`.analysis`: a whole recording at once (``plag-ros analyze``);
* :mod:`.live`: one sample at a time, as the dynamics node does;
* :mod:`.settings`: the dynamics node's options.
"""
