"""The dead letter as a schema model (`omstream.schemas.dead_letters`): the bytes on `<ns>.dlq`
are those the worker wrote by hand before, and its codes are one closed set that every refusal
draws from."""

from __future__ import annotations

import base64
import dataclasses
import re
from pathlib import Path
from typing import get_args, get_type_hints

import orjson
import pytest

from omstream.limits import Violation
from omstream.schemas.codec import DecodeFailure, encode
from omstream.schemas.dead_letters import DeadLetter, DeadLetterCode

LIMITS_PAGE = Path(__file__).resolve().parents[3] / "docs" / "producing.md"  # the manual's limits table


def handmade(*, code: str, reason: str, topic: str, partition: int, offset: int,
             key: bytes | None, value: bytes | None) -> bytes:
    """`omstream.worker.dead_letter` as it was before the model: the wire's reference."""
    return orjson.dumps({
        "type": "dead-letter", "code": code, "reason": reason,
        "source": {"topic": topic, "partition": partition, "offset": offset},
        "key": key.decode("utf-8", "replace") if key is not None else None,
        "value": base64.b64encode(value or b"").decode(),
    }, option=orjson.OPT_SORT_KEYS)


@pytest.mark.parametrize("fields", [
    {"code": "not-json", "reason": "record is not JSON: unexpected character", "topic": "om.log",
     "partition": 2, "offset": 17, "key": b"thread:t1", "value": b"{not json"},
    {"code": "wrong-key", "reason": "record key must be the memory key 'thread:t1' (it was None)",
     "topic": "om.log", "partition": 0, "offset": 0, "key": None, "value": None},
    {"code": "state-unreadable", "reason": "ValueError: \u00e9\n\"quoted\"", "topic": "omstream-om-state-changelog",
     "partition": 3, "offset": -1, "key": b"thread:\xff\xfe", "value": bytes(range(256)) * 40},
    {"code": "invalid", "reason": "invalid model job: x", "topic": "om.v.v2.jobs", "partition": 1, "offset": 9,
     "key": b"", "value": b""},
])
def test_the_bytes_on_the_dead_letter_topic_are_unchanged(fields):
    letter = DeadLetter.of(**fields)
    assert encode(letter) == handmade(**fields)
    again = DeadLetter.model_validate_json(encode(letter))
    assert again == letter and again.original() == (fields["value"] or b"")


def test_every_code_a_refusal_can_carry_is_in_the_closed_set():
    codes = set(get_args(DeadLetterCode))
    assert len(codes) == len(get_args(DeadLetterCode)) == 16
    decode = get_type_hints(DecodeFailure)["code"]
    limit = get_type_hints(Violation)["code"]
    assert set(get_args(decode)) | set(get_args(limit)) <= codes
    assert {"forged-result", "wrong-key", "conflict", "fold-error", "output-too-large", "state-unreadable"} <= codes
    assert {f.name for f in dataclasses.fields(Violation)} == {"code", "reason"}


def test_the_docs_name_only_codes_of_the_set():
    limits = LIMITS_PAGE.read_text(encoding="utf-8").split("**Limits.**", 1)[1].split("\n\n", 2)[1]
    documented = set(re.findall(r"\| `([a-z-]+)` \|", limits))
    assert documented == {"too-large", "too-deep", "too-many-parts", "text-too-long", "future-time", "memory-busy"}
    assert documented <= set(get_args(DeadLetterCode))


def test_a_code_outside_the_set_is_refused():
    with pytest.raises(ValueError):
        DeadLetter.of(code="rejected", reason="r", topic="om.log", partition=0, offset=0,  # type: ignore[arg-type]
                      key=None, value=None)
