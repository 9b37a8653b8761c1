"""The PlotJuggler and Foxglove layouts in config/ plot what the nodes publish.

No GUI runs here, so each file is checked against what the tool reads (PlotJuggler's
ROS 2 JointState parser names a series ``<topic>/<joint name>/effort``; Foxglove picks an
array element by index, ``<topic>.effort[k]``) and against the package's own topic list
and joint order: a renamed topic or joint fails here, not in a user's empty plot.
"""
from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
from plag_ros.ros import topics
from plag_ros.ros.foxglove_view import view_topics

CONFIG = Path(__file__).resolve().parents[1] / 'config'
PLOTTED = [topics.node_topic(topics.STATE_TOPIC)] + [
    topics.node_topic(topics.COMPONENT_PREFIX + name) for name in topics.COMPONENT_TOPICS]
"""The JointState topics whose effort the layouts plot: the torque, then each component."""


@pytest.fixture(scope='module')
def model() -> RobotModel:
    return RobotModel.from_urdf(default_urdf_path())


def _plotted_joints(model: RobotModel) -> list[str]:
    return [name for k, name in enumerate(model.joint_names) if model.mimic_source[k] < 0]


def test_plotjuggler_layout_names_every_series_by_topic_and_joint(model):
    root = ET.parse(CONFIG / 'plag_ros.plotjuggler.xml').getroot()
    assert root.tag == 'root'
    (widget,) = root.findall('tabbed_widget')
    assert widget.get('name') == 'Main Window'    # the only name PlotJuggler restores
    areas = []
    for splitter in widget.iter('DockSplitter'):
        children = [c for c in splitter if c.tag in ('DockArea', 'DockSplitter')]
        assert int(splitter.get('count')) == len(children)
        assert len(splitter.get('sizes').split(';')) == len(children)
        assert splitter.get('orientation') in ('-', '|')
        assert all(c.tag == 'DockArea' for c in children)   # one level: see the module doc
        areas += children
    curves = [[c.get('name') for c in area.iter('curve')] for area in areas]
    expected = [[f'{topic}/{joint}/effort' for joint in _plotted_joints(model)]
                for topic in PLOTTED]
    assert curves == expected
    (selected,) = root.iter('selected_topics')
    assert selected.get('value').split(';') == PLOTTED


def _mosaic_leaves(node) -> list[str]:
    if isinstance(node, str):
        return [node]
    assert set(node) <= {'first', 'second', 'direction', 'splitPercentage'}
    assert node['direction'] in ('row', 'column')
    return _mosaic_leaves(node['first']) + _mosaic_leaves(node['second'])


def test_foxglove_layout_plots_each_joint_by_index_with_its_name(model):
    layout = json.loads((CONFIG / 'plag_ros.foxglove.json').read_text())
    assert set(layout) == {'configById', 'globalVariables', 'userNodes', 'playbackConfig',
                           'layout'}
    panels = layout['configById']
    leaves = _mosaic_leaves(layout['layout'])
    assert sorted(leaves) == sorted(panels)       # every panel placed once
    plots = [panels[p] for p in leaves if p.split('!')[0] == 'Plot']
    joints = _plotted_joints(model)
    assert len(plots) == len(PLOTTED)
    for plot, topic in zip(plots, PLOTTED):
        assert len(plot['paths']) == len(joints)
        for path, joint in zip(plot['paths'], joints):
            found = re.fullmatch(r'(\S+)\.effort\[(\d+)\]', path['value'])
            assert found and found[1] == topic, path
            # the index is the joint's place in the message (model order), the label its name
            assert model.joint_names[int(found[2])] == joint
            assert joint.endswith(path['label'])
            assert path['enabled'] is True
    served = {topic for topic, _ in view_topics()}
    assert set(PLOTTED) <= served             # plag-ros sim --foxglove serves them
