"""Settings of the live decomposition (the ``plag_dynamics`` node's parameters), written once.

Every field is an option (:mod:`plag_ros.core.common.options`): the node declares its parameters
from :func:`dynamics_options` and makes a :class:`DynamicsSettings` back from their values
with :func:`plag_ros.core.common.options.build`. The estimator's ``filter.*`` options are
:class:`~plag_ros.core.estimation.filters.EstimatorConfig`'s own and can change while the node
runs; the plausibility limits are
:class:`~plag_ros.core.estimation.plausibility.PlausibilityConfig`'s, read only at start.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from plag_ros.core.common.options import Option, group, inline, option, options
from plag_ros.core.dynamics.description import DescriptionSettings
from plag_ros.core.dynamics.model_parameters import ModelSettings
from plag_ros.core.dynamics.motors import DEFAULT_POSITION_RESOLUTION
from plag_ros.core.estimation.filters import EstimatorConfig
from plag_ros.core.estimation.plausibility import PlausibilityConfig

__all__ = ['DynamicsSettings', 'FrictionReportSettings',
           'StampSource', 'dynamics_options']

StampSource = Literal['header', 'receive']

# A reliable keep-last writer drops samples a slow reader has not acknowledged once its
# history is full: 100 keeps 0.5 s at 200 Hz, so rviz2 or a recorder can lag briefly.
_OUTPUT_DEPTH = 100


@dataclass(frozen=True)
class FrictionReportSettings:
    """Settings of the friction report (:class:`plag_ros.core.estimation.friction.RestFriction`).

    Attributes:
        encoder_resolution: encoder step [rad]; with the filter it sets the rest band.
    """

    encoder_resolution: float = option(
        DEFAULT_POSITION_RESOLUTION, 'encoder step [rad] that sets the rest band of the '
        'friction report (default: 4096 counts per turn)', low=1e-12, high=1.0,
        read_only=True)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.encoder_resolution) and self.encoder_resolution > 0.0):
            raise ValueError('encoder_resolution must be positive and finite, got '
                             f'{self.encoder_resolution!r}')


@dataclass(frozen=True)
class DynamicsSettings:
    """Everything the live decomposition node can be told; defaults suit the CRANE-X7.

    Attributes are described by their option docs (``ros2 param describe``); rates in Hz
    on the stamps' time, periods in seconds, depths in messages.

    Raises:
        ValueError: inconsistent settings (the message names the parameter).
    """

    description: DescriptionSettings = inline(DescriptionSettings)
    model: ModelSettings = group(ModelSettings)
    frame_id: str = option('', 'frame of stamped outputs and markers; empty: the URDF root '
                           'link', read_only=True)
    filter: EstimatorConfig = group(EstimatorConfig)
    friction: FrictionReportSettings = group(FrictionReportSettings)
    stamp_source: StampSource = option(
        'header', "time of each sample: 'header' (the joint state stamp, as the driver's "
        "control cycle sets it) or 'receive' (this node's clock on arrival, for unstamped "
        'publishers)')
    output_rate_hz: float = option(
        0.0, 'max rate of the decomposition outputs [Hz] (stamp time); the estimator still '
        'takes every sample. 0: every sample', low=0.0, high=100000.0)
    visualization_rate_hz: float = option(
        20.0, 'max rate of ~/markers and ~/partial_image [Hz]; 0 disables them', low=0.0,
        high=10000.0)
    marker_scale: float = option(0.02, 'arrow length per unit torque [m/(N*m)]', low=0.0,
                                 high=100.0)
    image_cell: int = option(16, 'pixels per cell of ~/partial_image', low=1, high=256)
    image_limit: float = option(0.0, 'colour saturation of ~/partial_image [N*m]; 0: auto '
                                'per image', low=0.0, high=1e6)
    publish_bodies: bool = option(True, 'publish ~/body/<body> (one JointState per body, at '
                                  'the visualization rate)')
    publish_components: bool = option(
        True, 'publish ~/component/<name> (acceleration, velocity, gravity, friction: '
        'per-joint JointState, every sample, for plots by joint name)', read_only=True)
    diagnostics_period: float = option(1.0, 'period of /diagnostics [s]', low=0.05,
                                       high=3600.0, read_only=True)
    input_depth: int = option(
        0, 'history depth of the joint_states subscription (reliable, keep last); 0: 250 ms '
        'of input at filter.rate_hz, at least 50 (50 at 200 Hz)', low=0, high=100000,
        read_only=True)
    output_depth: int = option(_OUTPUT_DEPTH, 'history depth of every reliable output topic',
                               low=1, high=100000, read_only=True)
    low_latency: bool = option(
        False, 'opt in to process-wide tuning for latency (plag_ros.ros.tuning): '
        'joint_states on a thread of its own outside the executor, a 0.2 ms GIL switch '
        'interval and gc.freeze() after start-up; false: plain rclpy executor, interpreter '
        'defaults', read_only=True)
    private_wait_set: bool = option(
        False, "with low_latency: serve joint_states from rclpy's private wait-set API "
        'instead of an executor of its own (at 200 Hz about 0.1 core and 0.2 ms less); the '
        'running rclpy is checked against the one tested at start, and the public path is '
        'taken, with a warning, where it differs', read_only=True)
    # Only the margins the node has always offered; jump_slack and reanchor_samples keep
    # the core's defaults.
    plausibility: PlausibilityConfig = group(PlausibilityConfig,
                                             exclude=('jump_slack', 'reanchor_samples'))

    def __post_init__(self) -> None:
        if self.stamp_source not in ('header', 'receive'):
            raise ValueError(f"stamp_source must be one of ['header', 'receive'], got "
                             f'{self.stamp_source!r}')

    @property
    def input_queue_depth(self) -> int:
        """History depth of the joint_states subscription: ``input_depth``, or 250 ms of
        input at ``filter.rate_hz`` (at least 50)."""
        return self.input_depth or max(50, math.ceil(0.25 * self.filter.rate_hz))

    @property
    def receive_stamps(self) -> bool:
        """Whether samples are timed by their arrival, not by their header stamp."""
        return self.stamp_source == 'receive'


def dynamics_options() -> list[Option]:
    """The options of :class:`DynamicsSettings`: the dynamics node's parameters."""
    return options(DynamicsSettings())
