"""Reading the package's ROS parameter files the way a node sees them: dotted names."""
from __future__ import annotations

from pathlib import Path

import yaml

from plag_ros.ros.controller_file import node_section

CONFIG = Path(__file__).resolve().parents[1] / 'config'


def flatten(params: dict, prefix: str = '') -> dict[str, object]:
    """Nested ``ros__parameters`` as dotted names ({'filter': {'order': 3}} -> 'filter.order')."""
    flat: dict[str, object] = {}
    for key, value in params.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f'{prefix}{key}.'))
        else:
            flat[f'{prefix}{key}'] = value
    return flat


def node_parameters(file: str | Path, node: str, namespace: str = '/') -> dict[str, object]:
    """The dotted parameters a YAML file gives ``node`` in ``namespace``: every section
    that reaches it as rclpy matches them (``node``, ``/**``, ``/**/node``...,
    plag_ros.ros.controller_file.node_section).

    ``file`` is a name under ``config/`` or a path.
    """
    path = Path(file) if Path(file).is_absolute() else CONFIG / file
    section = node_section(yaml.safe_load(path.read_text()), node, namespace)
    assert section is not None, f'{path.name} has no section for {namespace} {node}'
    return flatten(section)
