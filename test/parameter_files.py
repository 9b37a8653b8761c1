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


def shipped_controller(file: str, **values):
    """The controller the impedance node builds from ``file``'s plag_impedance section
    (a name under ``config/``) and the bundled URDF, with ``values`` over the file's."""
    from plag_ros.core.control.impedance import PartialImpedanceController
    from plag_ros.core.control.settings import ImpedanceSettings
    from plag_ros.core.dynamics.engine import PartialLagrangian
    from plag_ros.core.dynamics.model import RobotModel, default_urdf_path

    model = RobotModel.from_urdf(default_urdf_path())
    settings = ImpedanceSettings.from_values({**node_parameters(file, 'plag_impedance'),
                                              **values})
    return PartialImpedanceController(PartialLagrangian(model),
                                      settings.controller_config(model),
                                      settings.reference_trajectory(len(model.actuated_names)))
