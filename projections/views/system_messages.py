"""The system messages of a context window (spec §10): the preamble and instructions, the
observation text as the actor reads it, the hints, extractor values, the working-memory document,
and the continuation reminder.  `context` puts them in order with the raw messages."""

from __future__ import annotations

import re
from datetime import UTC, datetime, tzinfo
from typing import Any

import orjson

from omstream.engine.prompting.groups import render_groups
from omstream.engine.prompting.observations import split_chunks
from omstream.engine.rules.resolution import ResolvedRetrieval
from omstream.projections.recall.instructions import recall_instructions
from omstream.projections.views.dates import add_relative_time_to_observations
from omstream.projections.views.working_memory import WorkingMemoryRendering, working_memory_system_message
from omstream.schemas.base import iso
from omstream.schemas.config.extractors import WORKING_MEMORY_SLUG

#: Exact (spec §10).
PREAMBLE = "The following observations block contains your memory of past conversations with this user."
INSTRUCTIONS = (
    "IMPORTANT: when you answer, draw on the specific details in these observations rather than "
    "generic advice. Personalise your reply and, when you recommend something, tie it to what the "
    "user has told you or done before.\n\n"
    "KNOWLEDGE UPDATES: facts change over time. When observations disagree, trust the most recent "
    "one: a newer observation replaces an older one on the same subject. Watch for wording that "
    "signals a change, such as \"will start\", \"is switching to\", \"changed to\" or \"moved to\".\n\n"
    "PLANNED ACTIONS: an observation may record something the user planned to do. If the date of "
    "that plan is now in the past, assume it happened unless a later observation says otherwise.\n\n"
    "MOST RECENT USER INPUT: the user's latest message is the strongest signal of what they want "
    "now; give it priority over everything recorded here.\n\n"
    "SYSTEM REMINDERS: text inside <system-reminder> tags is guidance for you from the system. "
    "Follow it, but never quote or mention it to the user.\n\n"
    # omstream's own rule (the original has none): a small reader otherwise answers a question
    # about something never said with the nearest fact it holds, often another person's.
    "WHAT YOU DO NOT KNOW: these observations and the messages after them are all you remember. "
    "If the user asks about something they do not record, or that they record about a different "
    "person, thing or time than the one asked about, say that it was not mentioned; never fill the "
    "gap with a similar fact or a guess."
)
CONTINUATION_HINT = (
    "This conversation is already under way: the messages before this point were condensed into "
    "your memory observations above. Carry on naturally and answer the user's latest message; treat "
    "the earlier context as background. Pick up unfinished work only where that helps the user, and "
    "if a suggested response is given, follow it in your own words. Never mention memory, "
    "observations, summaries or missing messages, and do not greet the user as if this were a new "
    "conversation. Messages after this reminder are newer and take priority."
)
#: The continuation message's text, wrapped as the original sends it.
CONTINUATION = f"<system-reminder>{CONTINUATION_HINT}</system-reminder>"
CONTINUATION_ID = "om-continuation"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_OTHER_CONVERSATIONS = (
    "The following content is from OTHER conversations different from the current conversation, "
    "they're here for reference,  but they're not necessarily your focus:\n"
    "START_OTHER_CONVERSATIONS_BLOCK\n{}\nEND_OTHER_CONVERSATIONS_BLOCK"
)


# --- the observation text as the actor reads it ----------------------------------------------
_ANCHOR_IDS = re.compile(r"(^|\n)([^\S\n]*)\[(O\d+(?:-N\d+)?)\][^\S\n]*")
_MEDIUM_LOW = re.compile(r"[🟡🟢]\s*")
# `[labels]` go; `[N items collapsed …]` and markdown link text `[x](url)` stay.
_BRACKET_LABEL = re.compile(r"\[(?![\d\s]*items collapsed)[^\]]+\](?!\()")
_ARROW = re.compile(r"\s*->\s*")
_SPACES = re.compile(r"  +")
_BLANK_LINES = re.compile(r"\n{3,}")


def optimize_observations_for_context(observations: str) -> str:
    """The log with what only the observer and reflector need taken out (spec §10): anchor ids
    `[O1]`/`[O1-N2]`, the 🟡/🟢 priorities (🔴 and ✅ stay), `[label]` tags, `->` arrows, runs
    of spaces and of blank lines."""
    text = _ANCHOR_IDS.sub(r"\1\2", observations) if observations else observations
    text = _MEDIUM_LOW.sub("", text)
    text = _BRACKET_LABEL.sub("", text)
    text = _ARROW.sub(" ", text)
    text = _SPACES.sub(" ", text)
    text = _BLANK_LINES.sub("\n\n", text)
    return text.strip()


def observation_context_chunks(observations: str, now: datetime | None = None,
                               zone: tzinfo = UTC, *, groups: bool = False) -> list[str]:
    """The transformed log split at its message boundaries, one string per chunk.

    The transform runs over the whole text before the split, so a gap marker between the last
    date of one chunk and the first of the next opens the later chunk (older chunks do not
    change when a chunk is appended).  Without `now` the dates are left as written.  With
    `groups` (retrieval on) a log of observation groups shows them as `## Group` sections with
    their ranges, as written (spec §10).
    """
    rendered = render_groups(observations) if groups else None
    text = rendered if rendered is not None else optimize_observations_for_context(observations)
    if now is not None:
        text = add_relative_time_to_observations(text, now, zone)
    return [chunk.strip() for chunk in split_chunks(text.strip()) if chunk.strip()]


def other_conversations_block(blocks: str) -> str:
    """Resource scope: the unobserved messages of the user's other threads, exactly framed."""
    return _OTHER_CONVERSATIONS.format(blocks)


def build_context_system_messages(
    observations: str, *, current_task: str | None = None, suggested_response: str | None = None,
    other_conversations: str | None = None, now: datetime | None = None, zone: tzinfo = UTC,
    extracted: dict[str, Any] | None = None, retrieval: ResolvedRetrieval | None = None,
    working_memory: WorkingMemoryRendering | None = None,
) -> list[str] | None:
    """The system messages of the window (`buildContextSystemMessages`), None for an empty log.

    With `retrieval` the recall guidance follows the instructions; a resource-scoped recall tool
    gets it even before there are observations (the agent may browse the user's other threads
    from its first message), as the only system message.  With `working_memory` the document
    has a system message of its own (`working_memory.working_memory_system_message`), there from
    the first message too, unless it goes as a state signal."""
    recall = (recall_instructions(retrieval.scope, search=retrieval.vector, custom=retrieval.instructions)
              if retrieval is not None else "")
    extracted = extracted or {}
    document = (working_memory_system_message(working_memory, extracted.get(WORKING_MEMORY_SLUG))
                if working_memory is not None else None)
    if not observations:
        first = [recall] if retrieval is not None and retrieval.scope == "resource" else []
        first += [document] if document else []
        return first or None
    system = [f"{PREAMBLE}\n\n{INSTRUCTIONS}" + (f"\n\n{recall}" if recall else "")]
    if other_conversations:
        system.append(other_conversations_block(other_conversations))
    chunks = observation_context_chunks(observations, now, zone, groups=retrieval is not None)
    if chunks:
        system += ["<observations>", *chunks]
    if current_task:
        system.append(f"<current-task>\n{current_task}\n</current-task>")
    if suggested_response:
        system.append(f"<suggested-response>\n{suggested_response}\n</suggested-response>")
    for slug, value in extracted.items():
        # The title is the thread's, not the agent's context; the working memory has its own.
        if slug != "thread-title" and not (slug == WORKING_MEMORY_SLUG and working_memory is not None):
            shown = value if isinstance(value, str) else orjson.dumps(value).decode()
            system.append(f"<{slug}>\n{shown}\n</{slug}>")
    return system + ([document] if document else [])


def continuation_message(thread_id: str | None = None, resource_id: str | None = None) -> dict[str, Any]:
    """The continuation reminder as the original stores it: a user message dated the epoch, so
    it sorts before every message of the history."""
    message: dict[str, Any] = {
        "id": CONTINUATION_ID, "role": "user", "createdAt": iso(_EPOCH),
        "content": {"format": 2, "parts": [{"type": "text", "text": CONTINUATION}]},
    }
    if thread_id is not None:
        message["threadId"] = thread_id
    if resource_id is not None:
        message["resourceId"] = resource_id
    return message
