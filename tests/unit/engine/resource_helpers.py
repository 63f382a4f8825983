"""Builders and a driver for resource-scope memories: threads of a user folded into one memory,
model jobs answered by the scripted observer and reflector in an order a test chooses."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from omstream.engine.fold import EngineConfig, fold, new_state
from omstream.engine.state import MemoryState
from omstream.schemas.config import load_om_config
from omstream.schemas.events import EventEnvelope
from omstream.schemas.jobs import ModelJob
from omstream.schemas.keys import memory_key
from omstream.schemas.messages import Message
from tests.helpers import T0, engine, scripted_result, text_of


def resource_engine(message_tokens: int = 400, **options) -> EngineConfig:
    """Resource scope, scripted models, no reflection unless asked for."""
    options.setdefault("reflection", {"observationTokens": 100_000})
    return engine(message_tokens, scope="resource", **options)


def say(n: int, thread: str, resource: str = "u1", *, words: int = 30) -> Message:
    """The n-th message of a run (its time is n half-minutes after T0).  Neither its id nor its
    text holds the thread id, so a thread id in a prompt can only come from the thread tags;
    its text starts with a tag `<resource>|<thread>|<n>` a test can look for."""
    return Message(
        id=f"msg-{resource}-{n:04d}", thread_id=thread, resource_id=resource,
        role="user" if n % 2 == 0 else "assistant",
        content=f"{tag(resource, thread, n)} " + text_of(words, n), created_at=T0 + timedelta(seconds=30 * n),
    )


def tag(resource: str, thread: str, n: int) -> str:
    """A message's mark, written without the thread id itself (`T<index of thread>`)."""
    return f"R{resource[-1]}T{thread[-1]}N{n:04d}"


@dataclass
class Memory:
    """One resource memory driven input by input, with its jobs waiting for an answer."""

    config: EngineConfig
    resource: str = "u1"
    state: MemoryState = None  # type: ignore[assignment]
    events: list[EventEnvelope] = field(default_factory=list)
    jobs: list[ModelJob] = field(default_factory=list)  # every job sent
    waiting: list[ModelJob] = field(default_factory=list)  # sent, not answered yet
    sent: list[Message] = field(default_factory=list)

    def __post_init__(self) -> None:
        key = memory_key(self.config.om, None, self.resource)
        self.state = new_state(key, "first-thread", self.resource)

    def feed(self, item, log_time=None) -> None:
        if isinstance(item, Message):
            self.sent.append(item)
        out = fold(self.state, item, self.config, log_time=log_time)
        assert out.rejected == (), out.rejected
        self.state = out.state
        self.events += out.events
        self.jobs += out.jobs
        self.waiting += out.jobs

    def answer(self, index: int = 0) -> None:
        self.feed(scripted_result(self.waiting.pop(index % len(self.waiting))))

    def answer_all(self) -> None:
        while self.waiting:
            self.answer(0)

    def of_type(self, kind: str) -> list[EventEnvelope]:
        return [e for e in self.events if e.type == kind]


def observed_ids(memory: Memory) -> list[str]:
    """Every message id an observation-end reported, with repeats."""
    return [i for e in memory.of_type("data-om-observation-end")
            if e.data.operation_type == "observation" for i in e.data.observed_message_ids]


def config_of(**options) -> EngineConfig:
    return EngineConfig(load_om_config(options))
