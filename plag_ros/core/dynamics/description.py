"""Where a node's robot model comes from: the robot's ``robot_description``, a parameter or
a URDF file.

The four options of :class:`DescriptionSettings` are the same parameters, under the same
names, in every node that loads a model (``plag_dynamics``, ``plag_impedance``,
``plag_driver``): a launch file passes one ``robot_description_source`` to all of them.
Nothing here imports ROS; :mod:`plag_ros.ros.robot_description` waits for the topic.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from plag_ros.core.common.options import option
from plag_ros.core.dynamics.model import default_urdf_path

__all__ = ['DESCRIPTION_SOURCES', 'DescriptionSettings', 'DescriptionSource']

DescriptionSource = Literal['topic', 'parameter', 'file']
DESCRIPTION_SOURCES: tuple[str, ...] = ('topic', 'parameter', 'file')


@dataclass(frozen=True)
class DescriptionSettings:
    """The robot model's source, read only at start.

    Raises:
        ValueError: an unknown source, an empty ``robot_description`` for ``'parameter'``,
            an ``urdf_path`` that is no file, a negative or non-finite timeout.
    """

    robot_description_source: DescriptionSource = option(
        'topic', "where the model comes from: 'topic' (robot_description, transient local; "
        "falls back to urdf_path after robot_description_timeout), 'parameter' or 'file'",
        read_only=True)
    robot_description: str = option(
        '', "URDF XML, used when robot_description_source is 'parameter'", read_only=True)
    urdf_path: str = option(
        '', "URDF file for 'file' and the topic fallback; empty: the bundled crane_x7.urdf",
        read_only=True)
    robot_description_timeout: float = option(
        5.0, 'seconds to wait for robot_description before falling back to urdf_path; 0 '
        'waits forever', low=0.0, high=3600.0, read_only=True)

    def __post_init__(self) -> None:
        source = self.robot_description_source
        if source not in DESCRIPTION_SOURCES:
            raise ValueError(f'robot_description_source must be one of '
                             f'{list(DESCRIPTION_SOURCES)}, got {source!r}')
        if source == 'parameter' and not self.robot_description.strip():
            raise ValueError("robot_description_source is 'parameter' but robot_description "
                             'is empty')
        if self.urdf_path and source != 'parameter' and not Path(self.urdf_path).is_file():
            raise ValueError(f'urdf_path {self.urdf_path!r} is not a file')
        timeout = self.robot_description_timeout
        if not (math.isfinite(timeout) and timeout >= 0.0):
            raise ValueError(f'robot_description_timeout must be finite and not negative, '
                             f'got {timeout!r}')

    @property
    def file(self) -> str:
        """The URDF file of ``'file'`` and of the topic's fallback (a path)."""
        return self.urdf_path or str(default_urdf_path())
