"""`omstream.plural`: a count and its noun agree."""

import pytest

from omstream.plural import plural


@pytest.mark.parametrize("count, text", [(0, "0 messages"), (1, "1 message"), (2, "2 messages"), (-1, "-1 messages")])
def test_a_count_and_its_noun_agree(count, text):
    assert plural(count, "message") == text


def test_an_irregular_plural_is_given():
    assert [plural(n, "memory", "memories") for n in (1, 3)] == ["1 memory", "3 memories"]
