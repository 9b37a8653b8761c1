"""Where the files plag_ros ships are (``config/``, ``urdf/``, ``launch/``): in the checkout
the code runs from, or in an install's ``share/plag_ros``.

colcon puts them in ``<prefix>/share/plag_ros`` of a workspace, which ``source
install/setup.bash`` adds to ``AMENT_PREFIX_PATH`` (what ament_index_python searches: read
here without importing ROS); ``pip install`` puts setup.py's ``data_files`` under the
interpreter's prefix (a virtualenv) or, with ``--user``, under the user base. The checkout
comes first, so code and configuration come from one tree: an install has no ``config/``
beside its ``site-packages``.
"""
from __future__ import annotations

import os
import site
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ['CHECKOUT', 'PACKAGE', 'install_prefixes', 'shipped_file']

PACKAGE = 'plag_ros'
CHECKOUT = Path(__file__).resolve().parents[3]
"""The folder above the ``plag_ros`` package: a checkout's root, or ``site-packages``."""


def install_prefixes() -> list[Path]:
    """The prefixes an install of plag_ros may be under, in the order they are searched:
    ``AMENT_PREFIX_PATH``'s, then ``sys.prefix``, then the user base."""
    ament = [Path(p) for p in os.environ.get('AMENT_PREFIX_PATH', '').split(os.pathsep) if p]
    return [*ament, Path(sys.prefix), Path(site.getuserbase())]


def shipped_file(*parts: str, checkout: Path = CHECKOUT,
                 prefixes: Sequence[Path] | None = None) -> Path:
    """Path of a file plag_ros ships, by its place in the repository
    (``shipped_file('config', 'crane_x7.yaml')``): the checkout's if there is one, else the
    first install's (:func:`install_prefixes`).

    Raises:
        FileNotFoundError: naming every place looked in.
    """
    candidates = [checkout.joinpath(*parts), *(
        Path(prefix, 'share', PACKAGE, *parts)
        for prefix in (install_prefixes() if prefixes is None else prefixes))]
    for path in candidates:
        if path.is_file():
            return path
    raise FileNotFoundError(f'{"/".join(parts)} of {PACKAGE} not found in '
                            + ', '.join(str(path) for path in candidates))
