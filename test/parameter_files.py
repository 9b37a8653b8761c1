"""Reading the package's ROS parameter files the way a node sees them: dotted names."""
from __future__ import annotations

from pathlib import Path

import yaml

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


def node_parameters(file: str | Path, node: str) -> dict[str, object]:
    """The dotted parameters a YAML file gives ``node`` (its own section, else ``/**``).

    ``file`` is a name under ``config/`` or a path.
    """
    path = Path(file) if Path(file).is_absolute() else CONFIG / file
    content = yaml.safe_load(path.read_text())
    return flatten(content.get(node, content.get('/**'))['ros__parameters'])
