"""The producer side: what an agent loop runs to write to a namespace and read its memory back.

- `om_client`: `OmClient`, the agent's writes to the input log (messages, steps, commands) and
  its reads of the context window (exported here, with `ThreadMemory`: `from omstream.client import
  OmClient` is the documented path);
- `outgoing`: what the client refuses before sending, the worker's own checks on sight;
- `intake`: the barrier that waits for the intake relay to put a plain producer's records on
  the log (a namespace key configured);
- `feed_reader`: the `/threads/{id}/feed` stream read as events;
- `tools`: the `recall` tool an agent gives its model, answered by `om serve`;
- `working_memory_tool`: the tool that writes the memory's working memory, when the agent keeps one;
- `function_tool`: what both tools share (the model's arguments read, its `tool` message written);
- `thread_memory`: `ThreadMemory`, the agent-loop protocol for one thread (add the turn's
  messages, a step, the window after it, the turn's end), which the example loop and every
  framework adapter (`omstream.integrations`) follow;
- `chat_records`: chat messages (OpenAI / litellm shape) as stored messages, the way back of
  the window's `chat`.

It imports the root's plumbing (`settings`, `topics`, `kafka`, `limits`), `crypto`, the
conversation records (`omstream.conversations.files`) and the recall parameters of the read side;
nothing of the worker, the pipeline or the replay.  `OmClient` is loaded on first use, so
`omstream.client.tools` and `omstream.client.feed_reader` load without the writer.
"""
from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__all__ = ["OmClient", "ThreadMemory"]

if TYPE_CHECKING:  # pragma: no cover
    from .om_client import OmClient
    from .thread_memory import ThreadMemory

_LAZY = {"OmClient": "omstream.client.om_client", "ThreadMemory": "omstream.client.thread_memory"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'omstream.client' has no attribute {name!r}")
    value = getattr(import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
