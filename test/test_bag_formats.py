"""Bags every supported distribution reads: the metadata.yaml BagWriter writes for each
target distribution, held against what that distribution's rosbag2 writes and reads
(test/data/rosbag2_metadata.yaml, read from rosbag2's sources per branch), and read back
by ``rosbags``."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from rosbags.highlevel import AnyReader

from plag_ros.io.bag import qos_profile
from plag_ros.io.bag_writer import DEFAULT_BAG_FOR, METADATA_VERSIONS, BagWriter

FACTS = yaml.safe_load((Path(__file__).parent / 'data' / 'rosbag2_metadata.yaml').read_text())
DISTRIBUTIONS = FACTS['distributions']
STORAGES = ('mcap', 'sqlite3')


def fields_of(table: dict, version: int) -> set[str]:
    """The fields a reader takes at ``version`` (a table of the version that added them)."""
    return {name for added, names in table.items() if int(added) <= version for name in names}


def write_bag(path: Path, storage: str, bag_for: str) -> list[tuple[str, int, bytes]]:
    """A bag of two topics (one latched) for ``bag_for``; its messages (topic, stamp,
    CDR bytes)."""
    written = []
    with BagWriter(path, storage=storage, bag_for=bag_for) as writer:
        store = writer.typestore
        string = store.types['std_msgs/msg/String']
        chatter = writer.add_topic('/chatter', 'std_msgs/msg/String', qos=qos_profile(depth=7))
        names = writer.add_topic('/names', 'std_msgs/msg/String',
                                 qos=qos_profile(depth=1, transient_local=True))
        for k, (conn, topic) in enumerate([(chatter, '/chatter'), (names, '/names'),
                                           (chatter, '/chatter')]):
            data = store.serialize_cdr(string(data=f'message {k}'), 'std_msgs/msg/String')
            t_ns = 1_000_000_000 + 5_000_000 * k
            writer.write(conn, t_ns, data)
            written.append((topic, t_ns, bytes(data)))
    return written


def test_the_versions_are_the_distributions_own():
    assert METADATA_VERSIONS == {name: facts['writes_version']
                                 for name, facts in DISTRIBUTIONS.items()}


@pytest.mark.parametrize('storage', STORAGES)
@pytest.mark.parametrize('bag_for', sorted(METADATA_VERSIONS))
def test_the_metadata_is_what_the_distribution_writes_and_rosbags_reads_it(tmp_path, storage,
                                                                           bag_for):
    """Exactly the fields the target's reader takes at its version, the offered QoS in the
    form it decodes (the text of a YAML list of profiles with the rmw enums' integers, or
    that list), and every message back through ``rosbags``."""
    path = tmp_path / 'bag'
    written = write_bag(path, storage, bag_for)
    info = yaml.safe_load((path / 'metadata.yaml').read_text())['rosbag2_bagfile_information']
    version = DISTRIBUTIONS[bag_for]['writes_version']
    assert info['version'] == version
    assert set(info) == fields_of(FACTS['fields'], version)
    for file in info['files']:
        assert set(file) == set(FACTS['file_fields'])
    depths = {}
    for topic in info['topics_with_message_count']:
        meta = topic['topic_metadata']
        assert set(meta) == fields_of(FACTS['topic_fields'], version)
        qos = meta['offered_qos_profiles']
        if DISTRIBUTIONS[bag_for]['qos_form'][version] == 'text':
            assert isinstance(qos, str)
            profiles = yaml.safe_load(qos)
            for profile in profiles:
                assert set(profile) == set(FACTS['qos_keys'])
                assert all(isinstance(profile[k], int) for k in
                           ('history', 'depth', 'reliability', 'durability', 'liveliness'))
                assert set(profile['deadline']) == {'sec', 'nsec'}
            # rmw's enums: KEEP_LAST 1, RELIABLE 1, VOLATILE 2 / TRANSIENT_LOCAL 1
            assert [(p['history'], p['reliability']) for p in profiles] == [(1, 1)]
            durability = profiles[0]['durability']
        else:
            assert isinstance(qos, list) and set(qos[0]) == set(FACTS['qos_keys'])
            durability = {'volatile': 2, 'transient_local': 1}[qos[0]['durability']]
            profiles = qos
        depths[meta['name']] = (profiles[0]['depth'], durability)
    assert depths == {'/chatter': (7, 2), '/names': (1, 1)}
    with AnyReader([path]) as reader:
        back = [(c.topic, t, bytes(raw)) for c, t, raw in reader.messages()]
    assert sorted(back) == sorted(written)
    assert np.unique([t for _, t, _ in back]).size == 3


def can_read(reader: str, version: int, qos_form: str) -> bool:
    """Whether ``reader``'s rosbag2 takes a bag of ``version`` whose QoS is in ``qos_form``
    (by the facts: a version it knows, with the form it decodes at that version)."""
    return DISTRIBUTIONS[reader]['qos_form'].get(version) == qos_form


def test_the_default_is_read_by_every_distribution_and_the_newer_format_not_by_humble():
    """The default target's bag opens on Humble, Jazzy and Kilted alike; one written for
    Jazzy or Kilted does not open on Humble (the claim of docs/limits.md)."""
    for target, facts in DISTRIBUTIONS.items():
        version = facts['writes_version']
        form = facts['qos_form'][version]
        readers = {name for name in DISTRIBUTIONS if can_read(name, version, form)}
        if target == DEFAULT_BAG_FOR:
            assert readers == set(DISTRIBUTIONS), readers
        else:
            assert readers == set(DISTRIBUTIONS) - {'humble'}, (target, readers)


def test_an_unknown_distribution_is_refused(tmp_path):
    with pytest.raises(ValueError, match='bag_for must be one of'):
        BagWriter(tmp_path / 'bag', bag_for='iron')
