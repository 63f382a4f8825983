"""Pydantic AI messages to chat messages and back (omstream.integrations.pydantic_ai_messages):
what is stored of a run, and how a window's chat is given back, tool calls and returns included."""

from __future__ import annotations

import asyncio
import importlib
import re
import sys
from datetime import UTC, datetime

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai.messages import (  # noqa: E402
    ImageUrl,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from omstream.client.chat_records import ToolNames, message_from_chat  # noqa: E402
from omstream.integrations.pydantic_ai_messages import (  # noqa: E402
    chat_of,
    is_window,
    messages_of,
    stored_ids,
    with_ids,
    without_orphans,
)
from omstream.projections.views.chat import chat_messages  # noqa: E402
from omstream.schemas.messages import Message  # noqa: E402

RUN = [
    ModelRequest(parts=[SystemPromptPart("You are terse."), UserPromptPart("Weather in Lyon?")], run_id="r"),
    ModelResponse(parts=[ThinkingPart("hmm"), TextPart("Checking."),
                         ToolCallPart("weather", {"city": "Lyon"}, tool_call_id="c1")], run_id="r"),
    ModelRequest(parts=[ToolReturnPart("weather", {"sky": "clear"}, tool_call_id="c1")], run_id="r"),
    ModelResponse(parts=[TextPart("Clear skies.")], run_id="r"),
]


def test_a_run_is_stored_as_chat_without_system_prompts_or_thinking():
    chat = [c for m in RUN for c in chat_of(m)]
    assert chat == [
        {"role": "user", "content": "Weather in Lyon?"},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Lyon"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"sky":"clear"}'},
        {"role": "assistant", "content": "Clear skies."},
    ]


def test_images_are_stored_as_image_parts():
    request = ModelRequest(parts=[UserPromptPart(["Look:", ImageUrl(url="https://example.com/a.png")])])
    assert chat_of(request) == [{"role": "user", "content": [
        {"type": "text", "text": "Look:"}, {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}]


def test_the_run_round_trips_through_stored_messages_and_the_window_chat():
    # chat -> stored messages (what ThreadMemory.add sends) -> the window's chat -> Pydantic AI
    names, now = ToolNames(), datetime(2026, 1, 1, tzinfo=UTC)
    stored = [message_from_chat(c, id=f"m{i}", thread_id="t", resource_id=None, created_at=now, names=names)
              for i, c in enumerate(c for m in RUN for c in chat_of(m))]
    back = messages_of(chat_messages(stored))
    assert all(is_window(m) for m in back)
    assert [type(m).__name__ for m in back] == ["ModelRequest", "ModelResponse", "ModelRequest", "ModelResponse"]
    assert back[0].parts == [UserPromptPart("Weather in Lyon?", timestamp=back[0].parts[0].timestamp)]
    text, call = back[1].parts
    assert isinstance(text, TextPart) and text.content == "Checking."
    assert isinstance(call, ToolCallPart) and (call.tool_name, call.tool_call_id) == ("weather", "c1")
    assert call.args_as_dict() == {"city": "Lyon"}
    (result,) = back[2].parts
    assert isinstance(result, ToolReturnPart) and (result.tool_name, result.tool_call_id) == ("weather", "c1")
    assert result.model_response_str() == '{"sky":"clear"}'  # the text the model read, as stored
    assert [p.content for p in back[3].parts] == ["Clear skies."]
    # ... and stores again as the same chat
    assert [c for m in back for c in chat_of(m)][1]["tool_calls"][0]["id"] == "c1"


def test_system_messages_of_the_window_are_system_prompts():
    back = messages_of([{"role": "system", "content": "<observations>x</observations>"},
                        {"role": "user", "content": "hi"}])
    assert len(back) == 1 and isinstance(back[0].parts[0], SystemPromptPart)
    assert back[0].parts[0].content == "<observations>x</observations>"


def test_a_stored_message_carries_its_ids_and_keeps_its_run():
    marked = with_ids(RUN[1], ["a-1"])
    assert stored_ids(marked) == ["a-1"] and stored_ids(RUN[1]) is None
    assert marked.run_id == "r" and marked.parts == RUN[1].parts and not is_window(marked)


def test_a_return_whose_call_was_observed_becomes_a_user_note():
    (note,) = without_orphans([RUN[2]])[0].parts
    assert isinstance(note, UserPromptPart) and "Tool weather (call c1" in str(note.content)
    assert without_orphans(RUN[1:3])[1] is RUN[2]


def test_without_pydantic_ai_the_import_names_the_extra(monkeypatch):
    for name in list(sys.modules):
        if name.split(".")[0] == "pydantic_ai" or name.startswith("omstream.integrations.pydantic_ai"):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pydantic_ai", None)  # what `import pydantic_ai` finds: nothing
    with pytest.raises(ImportError, match=re.escape("pip install 'omstream[pydantic-ai]'")):
        importlib.import_module("omstream.integrations.pydantic_ai")


class FakeThread:
    """ThreadMemory's calls as OmMemory makes them, on a list: `observe` makes the next step
    observe every message stored so far, as a blocking observation does."""

    def __init__(self) -> None:
        self.stored: list[Message] = []
        self.names, self.observed, self.observe, self.steps, self.ends = ToolNames(), set(), False, 0, 0

    async def add(self, chats):
        sent = [message_from_chat(c, id=f"m{len(self.stored) + i}", thread_id="t", resource_id=None,
                                  created_at=datetime.now(UTC), names=self.names) for i, c in enumerate(chats)]
        self.stored += sent
        return sent

    async def step(self, model=None):
        self.steps += 1
        if self.observe:
            self.observed |= {m.id for m in self.stored}
            self.observe = False
        raw = [m for m in self.stored if m.id not in self.observed]
        head = [{"role": "system", "content": "OBSERVED " + str(sorted(self.observed))}] if self.observed else []
        return {"messages": [m.wire() for m in raw], "chat": head + chat_messages(raw),
                "observedMessageIds": sorted(self.observed), "observations": ""}

    async def end_turn(self):
        self.ends += 1


def test_each_message_is_stored_once_and_the_model_reads_the_window(monkeypatch):
    from pydantic_ai import Agent
    from pydantic_ai.models.function import FunctionModel

    from omstream.integrations.pydantic_ai import OmMemory

    received: list[list] = []

    def model(messages, info):
        received.append(messages)
        if not any(isinstance(p, ToolReturnPart) for p in messages[-1].parts) and len(received) == 1:
            return ModelResponse(parts=[ToolCallPart("weather", {"city": "Lyon"}, tool_call_id="c1")])
        return ModelResponse(parts=[TextPart(f"reply {len(received)}")])

    def weather(city: str) -> str:
        return "clear"

    memory = OmMemory(None, "t")  # type: ignore[arg-type]
    thread = memory.thread = FakeThread()  # type: ignore[assignment]
    agent = Agent(FunctionModel(model), system_prompt="SYS", capabilities=[memory.capability()], tools=[weather])

    async def turns():
        first = await agent.run("Weather in Lyon?")
        await memory.record(first.new_messages())
        thread.observe = True  # the next step observes everything stored
        second = await agent.run("And tomorrow?")
        await memory.record(second.new_messages())
        return first, second

    first, second = asyncio.run(turns())
    contents = [m.content if isinstance(m.content, str) else [p.type for p in m.content] for m in thread.stored]
    assert contents == ["Weather in Lyon?", ["tool-call"], ["tool-result"], "reply 2", "And tomorrow?", "reply 3"]
    assert thread.steps == 3 and thread.ends == 2  # a step per model request, an end per turn
    # The request after the tool call: the call (stored) and its return (about to be sent).
    kinds = [p.part_kind for m in received[1] for p in m.parts]
    assert kinds == ["system-prompt", "user-prompt", "tool-call", "tool-return"]
    # The second run: the observations, the agent's system prompt, and only the new prompt.
    texts = [getattr(p, "content", None) for m in received[2] for p in m.parts]
    assert texts == ["SYS", "OBSERVED ['m0', 'm1', 'm2', 'm3']", "And tomorrow?"]
    assert all(stored_ids(m) is not None for m in second.new_messages())
    asyncio.run(memory.record(second.new_messages()))  # again: nothing new is stored
    assert len(thread.stored) == 6
