"""plag_ros in a namespace (``/arm1``): its parameter files reach its nodes there.

Two arms on one graph run one bring-up each in its own namespace (issue 51). A parameter
file's section reaches a node when its key, as rclpy matches it, matches the node's full
name: a bare ``plag_impedance:`` reaches ``/plag_impedance`` only, so every bundled
section is keyed ``/**/<node>:``; controller_manager's spawner takes its controller's
section by the keys it knows and refuses a bare name in a namespace. Those rules are
upstream's, recorded with their commits in test/data/namespace_upstream.yaml; the
expansion cases there are checked against the installed rcl (rclpy.expand_topic_name, no
graph needed).
"""
from __future__ import annotations

import pytest
import yaml
from rclpy.expand_topic_name import expand_topic_name
from ros_helpers import REPO

FACTS = yaml.safe_load((REPO / 'test' / 'data' / 'namespace_upstream.yaml').read_text())
CONFIG = REPO / 'config'
PARAMETER_FILES = ('crane_x7.yaml', 'impedance.yaml', 'sim.yaml', 'torque_mode.yaml',
                   'crane_x7_controllers.yaml')
ARM = '/arm1'


def resolve(name: str, namespace: str, node: str = 'plag_impedance') -> str:
    """``name`` as rcl expands it for ``node`` in ``namespace``."""
    return expand_topic_name(name, node, namespace)


def test_recorded_expansions_are_what_rcl_does():
    for name, node, namespace, full in FACTS['expansion']:
        assert resolve(name, namespace, node) == full, (name, namespace)


# --------------------------------------------------------- the parameter files' sections
def test_section_keys_reach_the_nodes_as_rclpy_matches_them():
    from plag_ros.ros.controller_file import section_reaches
    for key, full, reaches in FACTS['parameter_sections']['rclpy']['cases']:
        assert section_reaches(key, full) is reaches, (key, full)


@pytest.mark.parametrize('file', PARAMETER_FILES)
def test_every_bundled_section_reaches_its_node_in_the_root_and_in_a_namespace(file):
    """A bare ``plag_impedance:`` reaches /plag_impedance only: a namespaced node would
    start on code defaults without a word."""
    from plag_ros.ros.controller_file import section_reaches
    content = yaml.safe_load((CONFIG / file).read_text())
    assert content
    for key in content:
        node = key.rsplit('/', 1)[-1]
        for namespace in ('', ARM, '/lab/arm1'):
            assert section_reaches(key, f'{namespace}/{node}'), (file, key, namespace)


def test_the_spawner_takes_the_controllers_section_in_a_namespace(tmp_path):
    """The spawner's keys for a controller in /arm1 (a bare name is refused there)."""
    from plag_ros.ros.controller_file import CONTROLLER, read_controller_file
    facts = FACTS['parameter_sections']['spawner']
    content = yaml.safe_load((CONFIG / 'crane_x7_controllers.yaml').read_text())
    key, = content
    keys = [k.format(controller=CONTROLLER, namespace=ARM) for k in facts['keys']]
    assert key in keys and key != CONTROLLER, key
    # and plag_ros reads the file whichever key of the spawner's root ones it has
    shipped = read_controller_file(CONFIG / 'crane_x7_controllers.yaml')
    for other in (CONTROLLER, f'/{CONTROLLER}', f'/**/{CONTROLLER}'):
        path = tmp_path / 'controllers.yaml'
        path.write_text(yaml.safe_dump({other: content[key]}))
        assert read_controller_file(path).joints == shipped.joints, other
