"""Where the files plag_ros ships are (``config/``, ``urdf/``, ``launch/``): in the checkout
the code runs from, or in an install's ``share/plag_ros``.

colcon puts them in ``<prefix>/share/plag_ros`` of a workspace, which ``source
install/setup.bash`` adds to ``AMENT_PREFIX_PATH`` (what ament_index_python searches: read
here without importing ROS); ``pip install`` puts setup.py's ``data_files`` under the
interpreter's prefix (a virtualenv) or, with ``--user``, under the user base. Code and
configuration come from one tree where they can: the checkout the code runs from (a
folder with this package's package.xml), else the prefix the running code was installed
into, and only then the other prefixes (a sourced workspace with an older plag_ros must
not lend its config to a virtualenv's code).
"""
from __future__ import annotations

import os
import site
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ['CHECKOUT', 'PACKAGE', 'install_prefixes', 'is_checkout', 'shipped_file']

PACKAGE = 'plag_ros'
CHECKOUT = Path(__file__).resolve().parents[3]
"""The folder above the ``plag_ros`` package: a checkout's root, or ``site-packages``."""


def is_checkout(folder: Path) -> bool:
    """Whether ``folder`` is this package's source tree (its package.xml names it), not
    the ``site-packages`` an install put the code in."""
    try:
        return f'<name>{PACKAGE}</name>' in (folder / 'package.xml').read_text()
    except OSError:
        return False


def install_prefixes(code: Path = CHECKOUT) -> list[Path]:
    """The prefixes an install of plag_ros may be under, in the order they are searched:
    the one the running code is in (``code`` is its ``site-packages``:
    ``<prefix>/lib/pythonX.Y/site-packages``), ``AMENT_PREFIX_PATH``'s, ``sys.prefix``,
    the user base."""
    own = [code.parents[2]] if code.name in ('site-packages', 'dist-packages') else []
    ament = [Path(p) for p in os.environ.get('AMENT_PREFIX_PATH', '').split(os.pathsep) if p]
    return [*own, *ament, Path(sys.prefix), Path(site.getuserbase())]


def shipped_file(*parts: str, checkout: Path = CHECKOUT,
                 prefixes: Sequence[Path] | None = None) -> Path:
    """Path of a file plag_ros ships, by its place in the repository
    (``shipped_file('config', 'crane_x7.yaml')``): the checkout's if the code runs from
    one (:func:`is_checkout`), else the first install's (:func:`install_prefixes`).

    Raises:
        FileNotFoundError: naming every place looked in.
    """
    prefixes = install_prefixes(checkout) if prefixes is None else prefixes
    candidates = [*([checkout.joinpath(*parts)] if is_checkout(checkout) else []),
                  *(Path(prefix, 'share', PACKAGE, *parts) for prefix in prefixes)]
    for path in candidates:
        if path.is_file():
            return path
    raise FileNotFoundError(f'{"/".join(parts)} of {PACKAGE} not found in '
                            + ', '.join(str(path) for path in candidates))
