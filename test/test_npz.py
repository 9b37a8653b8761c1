"""The npz writer: archives that numpy and Python's zip reader take as their own."""
from __future__ import annotations

import subprocess
import sys
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest

from plag_ros.io import npz


def sample_arrays():
    rng = np.random.default_rng(3)
    return {
        'table': rng.normal(size=(300, 9, 9, 9)),                 # float64, several blocks
        'smooth': np.sin(np.arange(50_000) * 1e-3),
        'sparse': np.triu(rng.normal(size=(200, 9, 9))),
        'names': np.array(['crane_x7_shoulder_fixed_part_pan_joint', 'finger_a']),
        'stamps': np.arange(-5, 5, dtype=np.int64) * 5_000_000,
        'empty': np.zeros((0, 9)),
        'fortran': np.asfortranarray(rng.normal(size=(7, 5))),
        'float32': rng.normal(size=(11,)).astype(np.float32),
    }


@pytest.mark.parametrize('level', [0, 1, 3, 6])
def test_round_trip_through_numpy_and_zipfile(tmp_path, level):
    arrays = sample_arrays()
    path = tmp_path / 'out.npz'
    npz.save_npz(path, arrays, level)
    with zipfile.ZipFile(path) as zf:
        assert zf.testzip() is None                                # every CRC checks out
        infos = zf.infolist()
        assert [i.filename for i in infos] == [f'{k}.npy' for k in arrays]
        want = zipfile.ZIP_DEFLATED if level else zipfile.ZIP_STORED
        assert {i.compress_type for i in infos} == {want}
    with np.load(path) as loaded:
        assert list(loaded.keys()) == list(arrays)
        for name, value in arrays.items():
            assert loaded[name].dtype == value.dtype
            np.testing.assert_array_equal(loaded[name], value)


def test_members_equal_what_numpy_itself_writes(tmp_path):
    """Same .npy bytes as np.savez, and a compressed size in zlib's range."""
    arrays = sample_arrays()
    ours, theirs = tmp_path / 'ours.npz', tmp_path / 'theirs.npz'
    npz.save_npz(ours, arrays, 1)
    np.savez_compressed(theirs, **arrays)
    with zipfile.ZipFile(ours) as a, zipfile.ZipFile(theirs) as b:
        for name in arrays:
            assert a.read(f'{name}.npy') == b.read(f'{name}.npy'), name
        # like the torque tables: about 60 % structural zeros between noisy values
        table = a.getinfo('sparse.npy')
        assert table.compress_size < 0.6 * table.file_size
        assert zlib.crc32(a.read('table.npy')) == a.getinfo('table.npy').CRC


def test_bad_level_and_object_arrays_raise(tmp_path):
    with pytest.raises(ValueError, match='level must be in 0..9'):
        npz.save_npz(tmp_path / 'x.npz', {'a': np.zeros(3)}, 10)
    with pytest.raises(ValueError):
        npz.save_npz(tmp_path / 'y.npz', {'a': np.array([{}, None], dtype=object)}, 1)


# --- the two deflate backends -------------------------------------------------------------

_WRITE_IN_FRESH_INTERPRETER = """
import importlib
import sys
if sys.argv[1] == 'zlib':
    sys.modules['isal'] = None          # 'import isal' now raises ImportError
    sys.modules['isal.isal_zlib'] = None
sys.path.insert(0, sys.argv[3])
npz = importlib.import_module(sys.argv[4])
from test_npz import sample_arrays
for level in (1, 6):
    npz.save_npz(f'{sys.argv[2]}_{level}.npz', sample_arrays(), level)
print(npz.DEFLATE_BACKEND, sys.modules.get('isal.isal_zlib') is not None)
"""


@pytest.mark.parametrize('backend,isal_loaded', [('isal', 'True'), ('zlib', 'False')])
def test_both_backends_write_archives_numpy_reads_back_exactly(tmp_path, backend, isal_loaded):
    """With isal importable the writer picks it; without it, zlib. Both archives load.

    A fresh interpreter each, so the import-time choice in plag_ros.io.npz really runs (with
    ``isal`` blocked from import for the fallback), not a patched module attribute.
    """
    here = Path(__file__).resolve().parent
    done = subprocess.run([sys.executable, '-c', _WRITE_IN_FRESH_INTERPRETER, backend,
                           str(tmp_path / 'out'), str(here), npz.__name__],
                          capture_output=True, text=True, timeout=120, cwd=here.parent)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [backend, isal_loaded]
    arrays = sample_arrays()
    for level in (1, 6):
        path = tmp_path / f'out_{level}.npz'
        with zipfile.ZipFile(path) as zf:
            assert zf.testzip() is None
        with np.load(path) as loaded:
            assert list(loaded.keys()) == list(arrays)
            for name, value in arrays.items():
                assert loaded[name].dtype == value.dtype
                np.testing.assert_array_equal(loaded[name], value)


class _Spy:
    """Stands in for the deflate module: delegates, and counts who compressed."""

    def __init__(self, library) -> None:
        self.library = library
        self.compressors = 0

    def compressobj(self, *args):
        self.compressors += 1
        return self.library.compressobj(*args)

    def crc32(self, *args):
        return self.library.crc32(*args)


@pytest.mark.parametrize('level', [1, 3, 4, 9])
def test_isal_deflates_levels_one_to_three_zlib_the_rest(tmp_path, monkeypatch, level):
    """ISA-L has levels 1-3 only: those members go through the preferred backend, higher
    levels through zlib; the archive reads back exactly either way."""
    from isal import isal_zlib  # a requirement (requirements.txt): no skip if missing

    spy = _Spy(isal_zlib)
    # private: the spy replaces the chosen deflate module to see which members use it
    monkeypatch.setattr(npz, '_deflate', spy)
    arrays = sample_arrays()
    npz.save_npz(tmp_path / 'x.npz', arrays, level)
    assert spy.compressors == (len(arrays) if level <= 3 else 0)
    with np.load(tmp_path / 'x.npz') as loaded:
        for name, value in arrays.items():
            np.testing.assert_array_equal(loaded[name], value)
