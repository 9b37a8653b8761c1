"""Command-line tools: the ``plag-ros`` command and what its sub-commands run."""
