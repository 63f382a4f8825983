"""Namespace keys (wrapping, rotation) and the key book's rules (races, shreds, compaction)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from omstream.crypto import KeyNotLoaded, NamespaceKeyError, Shredded, Tampered, namespace_keys
from omstream.crypto.book import DK
from omstream.crypto.wrapping import NamespaceKeys
from omstream.settings import load_settings

from .keys import NEW, OLD, Topic


def test_wrapping_binds_the_key_to_its_id_memory_and_epoch():
    keys = NamespaceKeys([OLD])
    fp, wrapped = keys.wrap(b"k" * 32, "id1", "thread:t1", 0)
    assert keys.unwrap(fp, wrapped, "id1", "thread:t1", 0) == b"k" * 32
    for moved in (("id2", "thread:t1", 0), ("id1", "thread:t2", 0), ("id1", "thread:t1", 1)):
        with pytest.raises(Tampered):
            keys.unwrap(fp, wrapped, *moved)
    with pytest.raises(NamespaceKeyError, match="does not have"):
        NamespaceKeys([NEW]).unwrap(fp, wrapped, "id1", "thread:t1", 0)


def test_namespace_keys_come_from_settings_or_a_file_and_never_show(tmp_path):
    (tmp_path / "ns.key").write_text(f"{NEW}\n\n{OLD}\n")
    from_file = namespace_keys("", str(tmp_path / "ns.key"))
    assert from_file.fingerprints == NamespaceKeys([NEW, OLD]).fingerprints
    assert namespace_keys(f"{OLD},{NEW}").current == NamespaceKeys([OLD]).current
    settings = load_settings(env={"OM_NAMESPACE_KEY": OLD, "OM_SHRED_WINDOW_MS": "5000"})
    assert settings.namespace_key == OLD and settings.shred_window_ms == 5000
    assert OLD not in repr(settings) and OLD not in repr(from_file)
    with pytest.raises(NamespaceKeyError, match="fewer than 32"):
        namespace_keys("short")
    with pytest.raises(NamespaceKeyError, match="no namespace key"):
        namespace_keys("")


def test_two_proposals_at_once_the_first_wins_before_and_after_compaction():
    keys, topic = NamespaceKeys([OLD]), Topic()
    first = topic.propose(keys, "thread:t1")
    second = topic.propose(keys, "thread:t1")
    for book in (topic.book(keys), topic.book(keys, compact=True)):
        assert book.current("thread:t1").key_id == first
        assert book.key(second).memory_key == "thread:t1"  # the loser still decrypts
    topic.append(DK + second, None)  # its creator forgets it
    assert topic.book(keys, compact=True).current("thread:t1").key_id == first


def test_a_shred_is_sticky_and_a_late_proposal_is_repaired():
    keys, topic = NamespaceKeys([OLD]), Topic()
    k1 = topic.propose(keys, "thread:t1")
    other = topic.propose(keys, "thread:t2")
    topic.append(DK + k1, None)
    topic.shred("thread:t1", 0)
    late = topic.propose(keys, "thread:t1", epoch=0)  # a producer that had not read the shred
    book = topic.book(keys)
    for key_id in (k1, late):
        with pytest.raises(Shredded):
            book.key(key_id)
    assert book.repairs == {late} and book.current("thread:t1") is None
    assert book.key(other).memory_key == "thread:t2"
    topic.append(DK + late, None)
    assert not topic.book(keys).repairs
    # Compacted: nothing of thread:t1 but tombstones and the marker; a fresh reader agrees.
    fresh = topic.book(keys, compact=True)
    assert all(v is None for _, k, v in topic.compacted() if k.startswith(DK.encode()) and k != (DK + other).encode())
    with pytest.raises(KeyNotLoaded):  # compacted away: a ring that caught up reports Shredded
        fresh.key("never-written")
    # The memory used again: a new epoch, a new key.
    assert fresh.epoch("thread:t1") == 1
    again = topic.propose(keys, "thread:t1", epoch=1)
    assert topic.book(keys).current("thread:t1").key_id == again


def test_rotation_rewraps_keeps_order_and_old_readers_fail_only_on_new_wrapping():
    old, both, new = NamespaceKeys([OLD]), NamespaceKeys([NEW, OLD]), NamespaceKeys([NEW])
    topic = Topic()
    first = topic.propose(old, "thread:t1")
    loser = topic.propose(old, "thread:t1")
    material = topic.book(old).key(first).material
    book = topic.book(both)
    assert {p.key_id for p in book.stale_wrapping()} == {first, loser}
    from omstream.crypto.book import Proposal, proposal_value
    for p in sorted(book.stale_wrapping(), key=lambda p: -p.order):  # rewritten in any order
        fp, wrapped = both.wrap(book.key(p.key_id).material, p.key_id, p.memory_key, p.epoch)
        topic.append(DK + p.key_id, proposal_value(Proposal(p.key_id, p.memory_key, p.epoch, p.order, fp, wrapped)))
    after = topic.book(new, compact=True)  # OLD dropped: the compacted topic needs only NEW
    assert after.current("thread:t1").key_id == first and after.key(first).material == material
    assert not topic.book(both).stale_wrapping()


def test_a_successor_key_outlives_the_shred_of_its_predecessor():
    keys, topic = NamespaceKeys([OLD]), Topic()
    old = topic.propose(keys, "resource:u1", epoch=0)
    successor = topic.propose(keys, "resource:u1", epoch=1)
    book = topic.book(keys)
    assert book.current("resource:u1").key_id == old and book.current("resource:u1", 1).key_id == successor
    topic.append(DK + old, None)
    topic.shred("resource:u1", 0)
    for book in (topic.book(keys), topic.book(keys, compact=True)):
        assert book.current("resource:u1").key_id == successor and not book.repairs
        with pytest.raises((Shredded, KeyNotLoaded)):
            book.key(old)


def test_a_shred_names_its_deletion_so_a_later_fold_of_it_knows_it_is_done():
    keys, topic = NamespaceKeys([OLD]), Topic()
    topic.propose(keys, "resource:u1", epoch=0)
    topic.shred("thread:resource:u1/t0", 0)  # a marker of an older build: no deletion named
    topic.shred("resource:u1", 0, at=(2, 40))
    for book in (topic.book(keys), topic.book(keys, compact=True)):
        assert book.shredded_by("resource:u1", (2, 40)) and book.shredded_by("resource:u1", (2, 12))
        assert not book.shredded_by("resource:u1", (2, 41))  # a later deletion: not done yet
        assert not book.shredded_by("resource:u1", (3, 12))  # another partition's log
        assert not book.shredded_by("thread:resource:u1/t0", (2, 1))
        assert book.epoch("resource:u1") == 1 and book.epoch("thread:resource:u1/t0") == 1


def test_a_malformed_record_is_passed_over():
    keys, topic = NamespaceKeys([OLD]), Topic()
    topic.append(DK + "bad", b"not json")
    topic.append("shred:thread:t1", b'{"epoch": "x"}')
    good = topic.propose(keys, "thread:t1")
    book = topic.book(keys)
    assert book.malformed == 2 and book.current("thread:t1").key_id == good


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["propose", "forget", "shred"]), st.integers(0, 2), st.integers(0, 1)),
                max_size=25))
def test_the_books_lookup_by_memory_agrees_with_a_scan_of_every_live_key(ops):
    # `current` and `of_memory` read an index by memory key: it must say what a scan of `live` says.
    keys, topic = NamespaceKeys([OLD]), Topic()
    made: list[str] = []
    for op, memory, epoch in ops:
        if op == "propose":
            made.append(topic.propose(keys, f"thread:t{memory}", epoch=epoch))
        elif op == "forget" and made:
            topic.append(DK + made[memory % len(made)], None)
        elif op == "shred":
            topic.shred(f"thread:t{memory}", epoch)
    for book in (topic.book(keys), topic.book(keys, compact=True)):
        for memory in ("thread:t0", "thread:t1", "thread:t2"):
            scan = [p for p in book.live.values() if p.memory_key == memory]
            assert sorted(p.key_id for p in book.of_memory(memory)) == sorted(p.key_id for p in scan)
            for ahead in (0, 1):
                mine = [p for p in scan if p.epoch == book.epoch(memory) + ahead]
                expected = min(mine, key=lambda p: p.order).key_id if mine else None
                found = book.current(memory, ahead)
                assert (found.key_id if found else None) == expected
