"""Where the tests find recordings of real arms (data that is not part of the repository).

The recordings live in ``shared/data/real_arms/<arm>/`` beside the clone (CI checks
``../shared`` out next to it). ``PLAG_SHARED_DATA`` names another ``shared/data`` folder
and is looked at first. A test that needs an arm's folder calls :func:`real_arm_data`,
which skips the test, saying where it looked, when the folder is not there.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / 'shared' / 'data'
"""The default ``shared/data`` folder: beside the repository's own folder."""


def real_arm_data(name: str) -> Path:
    """The folder of arm ``name`` under ``shared/data/real_arms/``; skips the calling test
    when it is found neither under ``$PLAG_SHARED_DATA`` nor beside the repository."""
    places = [SHARED_DATA]
    override = os.environ.get('PLAG_SHARED_DATA')
    if override:
        places.insert(0, Path(override))
    looked = [place / 'real_arms' / name for place in places]
    for folder in looked:
        if folder.is_dir():
            return folder
    pytest.skip(f'no recordings of {name!r}: looked in {", ".join(map(str, looked))} '
                '(set PLAG_SHARED_DATA to a shared/data folder that has real_arms/)')
