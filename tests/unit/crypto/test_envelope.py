"""The envelope: round trip, tamper, moved ciphertexts, deterministic outputs."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from omstream.crypto import DataKey, Tampered, is_sealed, open_value, parse, seal_value

KEY = DataKey("k1", "thread:t1", os.urandom(32))
JSON = st.recursive(st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=40),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                    max_leaves=8)


@given(JSON, st.booleans())
def test_any_json_value_round_trips(value, deterministic):
    sealed = seal_value(value, KEY, "content", context=b"ev-1" if deterministic else None)
    assert is_sealed(sealed) and sealed.startswith("om1d:" if deterministic else "om1:")
    assert open_value(parse(sealed), KEY, "thread:t1", "content") == value


def test_random_nonces_differ_and_synthetic_ones_repeat():
    assert seal_value("secret", KEY, "content") != seal_value("secret", KEY, "content")
    assert seal_value("secret", KEY, "content", context=b"e1") == seal_value("secret", KEY, "content", context=b"e1")
    assert seal_value("secret", KEY, "content", context=b"e1") != seal_value("secret", KEY, "content", context=b"e2")
    # Another field of the same output gets another nonce.
    assert parse(seal_value("x", KEY, "a", context=b"e1")).nonce != parse(seal_value("x", KEY, "b", context=b"e1")).nonce


@pytest.mark.parametrize("context", [None, b"ev"])
def test_moved_to_another_memory_or_field_fails(context):
    env = parse(seal_value("the locker code is 4711", KEY, "content", context=context))
    with pytest.raises(Tampered):
        open_value(env, KEY, "thread:t2", "content")
    with pytest.raises(Tampered):
        open_value(env, KEY, "thread:t1", "data.observations")


def test_edited_truncated_or_wrong_key_fails():
    sealed = seal_value("secret", KEY, "content")
    fmt, key_id, nonce, body = sealed.split(":")
    flipped = body[:-2] + ("A" if body[-2] != "A" else "B") + body[-1]
    for bad in (f"{fmt}:{key_id}:{nonce}:{flipped}", f"{fmt}:{key_id}:{nonce}:{body[:-4]}", f"om1d:{key_id}:{nonce}:{body}"):
        with pytest.raises(Tampered):
            open_value(parse(bad), KEY, "thread:t1", "content")
    other = DataKey("k1", "thread:t1", os.urandom(32))
    with pytest.raises(Tampered):
        open_value(parse(sealed), other, "thread:t1", "content")
    with pytest.raises(Tampered):
        open_value(parse(sealed.replace(":k1:", ":k2:")), KEY, "thread:t1", "content")


@pytest.mark.parametrize("text", ["om1:a:b", "om9:k:AAAA:AAAA", "om1::AAAAAAAAAAAAAAAA:AA", "om1:k:AA:AAAA", "hello"])
def test_what_is_not_an_envelope_is_refused(text):
    with pytest.raises(Tampered):
        parse(text)


def test_the_key_material_is_never_in_a_repr():
    assert KEY.material.hex() not in repr(KEY)
