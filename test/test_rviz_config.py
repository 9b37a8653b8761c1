"""config/plag_ros.rviz against the rviz2 sources of each distribution.

rviz2 drops a key it does not know without a word, and turns an unknown class into a
failed display: neither shows before a user opens the config. Without rviz2 on these
machines, the check is against what rviz2's sources say each class saves
(test/data/rviz2_properties.yaml, with the upstream commits): every panel, display, tool
and view class must exist on the distribution, and every key the config gives it must be
one of its properties, children included.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / 'config' / 'plag_ros.rviz'
UPSTREAM = yaml.safe_load((Path(__file__).parent / 'data' / 'rviz2_properties.yaml').read_text())
DISTROS = tuple(UPSTREAM['sources'])

Tree = dict[str, Any]


def known_properties(distro: str) -> dict[str, Tree]:
    """Class name -> its property tree on ``distro`` (None marks a leaf)."""
    classes = copy.deepcopy(UPSTREAM['classes'])
    for name, added in UPSTREAM['added'].get(distro, {}).items():
        classes[name].update(added)
    return classes


def _unknown_keys(given: Tree, known: Tree | None, path: str) -> list[str]:
    """Keys of ``given`` (a config mapping) that ``known`` lacks, as 'path/key'."""
    out = []
    for key, value in given.items():
        if known is None or key not in known:
            out.append(f'{path}/{key}')
        elif isinstance(value, dict) and known[key] is not None:
            out += _unknown_keys(value, known[key], f'{path}/{key}')
    return out


def problems(config: Tree, distro: str) -> list[str]:
    """What rviz2 of ``distro`` would not know in ``config``: unknown classes and keys."""
    classes = known_properties(distro)
    found = []

    def check(entry: Tree, path: str) -> None:
        name = entry.get('Class', '')
        if name not in classes:
            found.append(f'{path}: unknown class {name!r}')
            return
        found.extend(_unknown_keys(entry, classes[name], path))

    for panel in config.get('Panels', []):
        check(panel, f"Panels/{panel.get('Name', panel.get('Class'))}")
    manager = config['Visualization Manager']
    top = {key: value for key, value in manager.items()
           if key not in ('Displays', 'Tools', 'Views', 'Transformation')}
    found += _unknown_keys(top, UPSTREAM['visualization_manager'], 'Visualization Manager')
    for display in manager.get('Displays', []):
        check(display, f"Displays/{display.get('Name')}")
    for tool in manager.get('Tools', []):
        check(tool, 'Tools')
    views = manager.get('Views', {})
    found += _unknown_keys(views, UPSTREAM['visualization_manager']['Views'], 'Views')
    if views.get('Current'):
        check(views['Current'], 'Views/Current')
    transformation = manager.get('Transformation', {}).get('Current')
    if transformation and transformation.get('Class') != 'rviz_default_plugins/TF':
        found.append(f'Transformation: unknown class {transformation.get("Class")!r}')
    return found


def _config() -> Tree:
    return yaml.safe_load(CONFIG.read_text())


@pytest.mark.parametrize('distro', DISTROS)
def test_every_class_and_key_of_the_config_exists_upstream(distro):
    assert problems(_config(), distro) == []


def _effort_display(config: Tree) -> Tree:
    (effort,) = [d for d in config['Visualization Manager']['Displays']
                 if d['Class'] == 'rviz_default_plugins/Effort']
    return effort


def test_the_check_fails_on_what_rviz2_drops():
    """The check is not empty: the 'Arrow Width' the config once had (upstream: 'Width'),
    a misspelt child of Topic and an unknown class are each reported, on every distro."""
    arrow = _config()
    effort = _effort_display(arrow)
    effort['Arrow Width'] = effort.pop('Width')
    child = _config()
    _effort_display(child)['Topic']['Reliabilty Policy'] = 'Reliable'
    unknown = _config()
    _effort_display(unknown)['Class'] = 'rviz_default_plugins/Efforts'
    name = 'Displays/Joint torque (plag_dynamics)'
    for distro in DISTROS:
        assert problems(arrow, distro) == [f'{name}/Arrow Width']
        assert problems(child, distro) == [f'{name}/Topic/Reliabilty Policy']
        assert problems(unknown, distro) == [
            f"{name}: unknown class 'rviz_default_plugins/Efforts'"]


def test_the_effort_display_floor_is_in_the_docs():
    """Humble's rviz2 has the Effort display from 11.2.6 on: the testing page says so."""
    floor = UPSTREAM['first_release']['humble']['rviz_default_plugins/Effort']
    page = (REPO / 'docs' / 'testing.md').read_text()
    assert f'rviz2 {floor}' in page
