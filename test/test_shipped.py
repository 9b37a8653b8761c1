"""Where the shipped files are found (plag_ros.core.common.shipped): the checkout first, then
each install prefix in order; the layout colcon and pip give them is
``<prefix>/share/plag_ros/<folder>/<file>`` (setup.py's data_files; test_lab_install.py
builds both installs for real)."""
from __future__ import annotations

from pathlib import Path

import pytest

from plag_ros.core.common.shipped import CHECKOUT, install_prefixes, is_checkout, shipped_file


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
    # a stray config/ beside site-packages is no checkout: the installs' files win
    put(checkout, 'config', 'crane_x7.yaml')
    assert shipped_file('config', 'crane_x7.yaml', checkout=checkout,
                        prefixes=[colcon, pip]) == first
    (checkout / 'package.xml').write_text('<package><name>plag_ros</name></package>')
    assert shipped_file('config', 'crane_x7.yaml', checkout=checkout,
                        prefixes=[colcon, pip]) == checkout / 'config' / 'crane_x7.yaml'


def test_the_running_codes_own_prefix_comes_before_a_sourced_workspace(monkeypatch, tmp_path):
    """Code installed in a virtualenv with a workspace sourced that holds another plag_ros:
    the files come from the code's own prefix."""
    venv, workspace = tmp_path / 'venv', tmp_path / 'ws' / 'install' / 'plag_ros'
    code = venv / 'lib' / 'python3.11' / 'site-packages'
    code.mkdir(parents=True)
    monkeypatch.setenv('AMENT_PREFIX_PATH', str(workspace))
    put(workspace, 'share', 'plag_ros', 'urdf', 'crane_x7.urdf')
    own = put(venv, 'share', 'plag_ros', 'urdf', 'crane_x7.urdf')
    assert install_prefixes(code)[:2] == [venv, workspace]
    assert shipped_file('urdf', 'crane_x7.urdf', checkout=code) == own


def test_a_missing_file_names_every_place_looked_in(tmp_path):
    put(tmp_path / 'a', 'package.xml').write_text('<package><name>plag_ros</name></package>')
    with pytest.raises(FileNotFoundError) as err:
        shipped_file('urdf', 'nope.urdf', checkout=tmp_path / 'a', prefixes=[tmp_path / 'b'])
    assert str(tmp_path / 'a' / 'urdf' / 'nope.urdf') in str(err.value)
    assert str(tmp_path / 'b' / 'share' / 'plag_ros' / 'urdf' / 'nope.urdf') in str(err.value)


def test_this_checkout_has_the_files_whatever_is_sourced(monkeypatch, tmp_path):
    monkeypatch.setenv('AMENT_PREFIX_PATH', f'{tmp_path / "a"}:{tmp_path / "b"}')
    assert install_prefixes()[:2] == [tmp_path / 'a', tmp_path / 'b']
    assert is_checkout(CHECKOUT)
    assert shipped_file('urdf', 'crane_x7.urdf') == CHECKOUT / 'urdf' / 'crane_x7.urdf'
