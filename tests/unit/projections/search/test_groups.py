"""Observation groups read back from observation text, chunks, and the §12 entry ids."""

import hashlib
import uuid

from omstream.projections.search.groups import chunks, entry_id, parse_groups
from tests.unit.projections.search.events import group


def test_groups_in_order_with_their_range_kind_and_text():
    text = "\n".join([
        "Date: Mar 3, 2025",
        group("a" * 16, "m1", "m4", ["* 🔴 User's dog is named Biscuit", "* 🟡 likes walks"]),
        "stray line outside any group",
        group("b" * 16, "m5", "m9", ["* 🔴 condensed"], kind="reflection"),
    ])
    groups = parse_groups(text)
    assert [(g.id, g.range, g.kind) for g in groups] == [
        ("a" * 16, "m1:m4", "observation"), ("b" * 16, "m5:m9", "reflection")]
    assert groups[0].text == "* 🔴 User's dog is named Biscuit\n* 🟡 likes walks"


def test_a_group_without_its_close_tag_is_ignored():
    unclosed = '<observation-group id="cccccccccccccccc" range="m1:m2">\n* lost'
    text = unclosed + "\n" + group("d" * 16, "m3", "m4", ["* kept"]) + "\n" + unclosed
    assert [g.id for g in parse_groups(text)] == ["d" * 16]


def test_tags_count_only_at_the_start_of_a_line():
    text = 'note <observation-group id="eeeeeeeeeeeeeeee" range="a:b">\n* x\n</observation-group>'
    assert parse_groups(text) == []


def test_chunks_are_observations_with_their_indented_lines_and_long_ones_are_cut():
    text = "* 🔴 (09:15) User's dog is named Biscuit\n  * -> a beagle\n\n* 🟡 (09:20) likes walks\n* 🟢 rain"
    assert chunks(text) == ["* 🔴 (09:15) User's dog is named Biscuit\n  * -> a beagle", "* 🟡 (09:20) likes walks",
                            "* 🟢 rain"]
    long = "* long note\n" + "\n".join(f"  * detail {i} " + "x" * 90 for i in range(50))
    parts = chunks(long, size=1000)
    assert len(parts) > 1 and all(len(p) <= 1000 for p in parts)
    assert "\n".join(parts) == long
    assert chunks("") == [""]


def test_entry_id_is_the_uuid_of_the_sha256_of_the_json_array_with_version_8():
    expected = hashlib.sha256(b'["u1","t1","abc",0]').hexdigest()
    got = entry_id("u1", "t1", "abc", 0)
    assert str(uuid.UUID(got)) == got and got[14] == "8"  # the version nibble
    assert got.replace("-", "") == expected[:12] + "8" + expected[13:32]
    assert entry_id(None, "t1", "abc", 1).replace("-", "")[:12] == \
        hashlib.sha256(b'[null,"t1","abc",1]').hexdigest()[:12]
    assert entry_id("u1", "t1", "abc", 0) != entry_id("u2", "t1", "abc", 0)
