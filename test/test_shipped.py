"""Where the shipped files are found (plag_ros.core.common.shipped): the checkout first, then
each install prefix in order; the layout colcon and pip give them is
``<prefix>/share/plag_ros/<folder>/<file>`` (setup.py's data_files; test_lab_install.py
builds both installs for real)."""
from __future__ import annotations

from pathlib import Path

import pytest

from plag_ros.core.common.shipped import CHECKOUT, install_prefixes, shipped_file


def put(root: Path, *parts: str) -> Path:
    path = root.joinpath(*parts)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(str(root))
    return path


def test_an_install_is_found_under_its_prefix_when_there_is_no_checkout(tmp_path):
    checkout, colcon, pip = tmp_path / 'site-packages', tmp_path / 'ws', tmp_path / 'venv'
    checkout.mkdir()
    installed = put(pip, 'share', 'plag_ros', 'config', 'crane_x7.yaml')
    assert shipped_file('config', 'crane_x7.yaml', checkout=checkout,
                        prefixes=[colcon, pip]) == installed
    first = put(colcon, 'share', 'plag_ros', 'config', 'crane_x7.yaml')
    assert shipped_file('config', 'crane_x7.yaml', checkout=checkout,
                        prefixes=[colcon, pip]) == first
    mine = put(checkout, 'config', 'crane_x7.yaml')
    assert shipped_file('config', 'crane_x7.yaml', checkout=checkout,
                        prefixes=[colcon, pip]) == mine


def test_a_missing_file_names_every_place_looked_in(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        shipped_file('urdf', 'nope.urdf', checkout=tmp_path / 'a', prefixes=[tmp_path / 'b'])
    assert str(tmp_path / 'a' / 'urdf' / 'nope.urdf') in str(err.value)
    assert str(tmp_path / 'b' / 'share' / 'plag_ros' / 'urdf' / 'nope.urdf') in str(err.value)


def test_ament_prefixes_come_first_and_this_checkout_has_the_files(monkeypatch, tmp_path):
    monkeypatch.setenv('AMENT_PREFIX_PATH', f'{tmp_path / "a"}:{tmp_path / "b"}')
    assert install_prefixes()[:2] == [tmp_path / 'a', tmp_path / 'b']
    assert shipped_file('urdf', 'crane_x7.urdf') == CHECKOUT / 'urdf' / 'crane_x7.urdf'
