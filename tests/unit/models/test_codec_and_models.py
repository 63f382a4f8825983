import orjson

from omstream.models.calls import is_transient, litellm_model_name
from omstream.models.scripted import observe
from omstream.schemas.codec import DecodeFailure, decode_input, encode
from omstream.schemas.messages import Message
from tests.helpers import message


def test_unreadable_records_get_named_reasons():
    assert decode_input(b"{nope").code == "not-json"
    assert decode_input(b"[1, 2]").code == "invalid"
    assert decode_input(b'{"type": "telemetry"}').code == "unknown-type"
    newer = decode_input(orjson.dumps({**message(0).wire(), "schemaVersion": 2}))
    assert isinstance(newer, DecodeFailure) and newer.code == "newer-schema"
    invalid = decode_input(b'{"id": "x", "threadId": "t", "role": "robot"}')
    assert invalid.code == "invalid" and "role" in invalid.reason and "createdAt" in invalid.reason


def test_message_round_trips_byte_stably():
    m = message(3)
    raw = encode(m)
    again = decode_input(raw)
    assert isinstance(again, Message) and again == m and encode(again) == raw


def test_scripted_observer_follows_the_scenario_rules():
    user = ("## New Message History to Observe\n\nMar 3 2025:\nUser (9:05 AM): " + "word " * 50
            + "\nAssistant: short answer\n(9:20 PM): 2 hours later\n\n---\n\n## Your Task\n\nx")
    out = observe("system <current-task>", user)
    lines = out.split("\n")
    assert lines[1] == "Date: Mar 3, 2025"
    assert lines[2] == "* 🔴 (09:05) User said: " + " ".join(["word"] * 40) + " ..."
    assert lines[3] == "* 🟡 (09:05) Assistant replied: short answer"
    assert lines[4] == "* 🟢 (21:20) Signal: 2 hours later"
    assert '<current-task>\nPrimary: answer the user\'s latest message: "word word word word word word word word ..."' in out
    assert "<current-task>" not in observe("system", user)
    assert "No new observable content" in observe("s", "## New Message History to Observe\n\n")


def test_model_names_and_transient_errors():
    assert litellm_model_name("google/gemini-2.5-flash") == "gemini/gemini-2.5-flash"
    assert litellm_model_name("openai/gpt-5-mini") == "openai/gpt-5-mini"

    class HttpError(Exception):
        def __init__(self, status):
            super().__init__(f"status {status}")
            self.status_code = status

    assert is_transient(HttpError(429)) and is_transient(HttpError(503))
    assert not is_transient(HttpError(400))
    assert is_transient(RuntimeError("socket hang up"))
    wrapped = RuntimeError("outer")
    wrapped.__cause__ = ConnectionResetError("Connection reset by peer")
    assert is_transient(wrapped)
