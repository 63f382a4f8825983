"""What the Observer is asked (spec §7.1, §7.3, §7.4), in omstream's own words.

The headings and tags are a contract: parsers, the scripted models and users rely on
`## Previous Observations`, `## New Message History to Observe`, `## Your Task`, the
`<observations>` block and the `<current-task>` / `<suggested-response>` sections.
"""

from __future__ import annotations

from .reflection_plan import COMPRESSION_GUIDANCE
from .truncation import TRUNCATION_NOTICE

__all__ = [
    "observer_system_prompt",
    "observer_user_prompt",
    "reflector_system_prompt",
    "reflector_user_prompt",
]

_ROLE = """You are the memory of an AI assistant. You watch its conversations and write down \
what it must remember. Your observations are the assistant's only memory of everything that is \
no longer in its context window: what you leave out is forgotten."""

_INSTRUCTIONS = """What to record:
- Tell apart what the user asserts ("User stated ...", high priority) from what the user asks \
("User asked ...") and what the user intends ("User stated they will ...", with the date if given).
- When something changes, say what it replaces ("will start X (changing from Y)"). A user's own \
statement outranks a later question about the same thing.
- Start every observation with the time of its message, (HH:MM) in 24-hour form. Only when the \
text names another moment that resolves to a real date, add "(meaning <date>)" or "(estimated \
<date>)" at the end of the line; never for vague words such as "soon" or "recently". Give each \
event its own line.
- Keep unusual wording in quotes and use precise verbs (bought, booked, subscribed, received).
- Keep what makes the assistant's own answers distinct: names, numbers, counts, list structure.
- Capture short user messages almost word for word and summarise long ones with key quotes.
- Group repeated tool actions under one line with "  * ->" sub-bullets; record what each tool \
call was for and what it showed.
- Mark finished work with a check mark: "  * ✅ ..." under its line, or "* ✅ (HH:MM) ..." on its \
own, only when something is really done (confirmed, accepted or reached).

Priorities: every observation starts with 🔴 (user facts, preferences, open goals, critical \
context), 🟡 (project details, learned information, tool results), 🟢 (minor or uncertain) or ✅ \
(completed). Be terse: one to five observations per exchange."""

_FORMAT = """Output format (exactly this shape, dates grouped, 24-hour times):
<observations>
Date: Dec 4, 2025
* 🔴 (14:30) User prefers direct answers
* 🟡 (14:32) User might prefer dark mode
* 🔴 (14:33) Agent debugging auth issue
  * -> ran git status, found 3 modified files
  * ✅ Tests passing, auth issue resolved
</observations>"""

_HINTS = """After </observations>, add these sections:
<current-task>
The task in progress: "Primary: ..." and, if any, "Secondary: ...". Put a new question or \
request from the user first; say "waiting for user" when the user must decide.
</current-task>
<suggested-response>
A short hint for the assistant's very next message, e.g. to pause for the user when needed.
</suggested-response>"""

_SINGLE_THREAD = "Do not write thread ids or <thread> tags: this is a single conversation."


def _system_prompt(parts: list[str], hints: str | None, instruction: str | None) -> str:
    """The sections, the hint sections when asked for, then the user's custom instructions."""
    prompt = "\n\n".join([*parts, hints] if hints else parts)
    if instruction:
        prompt += f"\n\n=== CUSTOM INSTRUCTIONS ===\n\n{instruction}"
    return prompt


def observer_system_prompt(*, continuation_hints: bool = True, instruction: str | None = None) -> str:
    return _system_prompt([_ROLE, _INSTRUCTIONS, _FORMAT, _SINGLE_THREAD],
                          _HINTS if continuation_hints else None, instruction)


def observer_user_prompt(
    *,
    transcript: str,
    previous_observations: str = "",
    current_task: str | None = None,
    suggested_response: str | None = None,
    truncated: bool = False,
) -> str:
    """Previous observations, prior hints, the new history, then the task (one user message)."""
    blocks: list[str] = []
    if previous_observations:
        notice = f"\n\n{TRUNCATION_NOTICE}" if truncated else ""
        blocks.append(
            f"## Previous Observations\n\n{previous_observations}\n\n---\n\n"
            "These are already recorded. Do not repeat them: what you write now is appended to them."
            + notice
        )
    prior = [f"- prior {name}: {value}" for name, value in
             (("current-task", current_task), ("suggested-response", suggested_response)) if value]
    if prior:
        blocks.append(
            "## Prior Thread Metadata\n\n" + "\n".join(prior)
            + "\n\nTreat these as continuity hints, not as facts to observe again."
        )
    blocks.append(f"## New Message History to Observe\n\n{transcript}")
    blocks.append(
        "## Your Task\n\nExtract new observations from the message history above. Do not repeat "
        "previous observations. Use the output format."
    )
    return "\n\n---\n\n".join(blocks)


# --- Reflector (spec §8.1, §8.2) ---------------------------------------------------------------
_REFLECTOR_ROLE = """You are the same memory, now reflecting. Below are the instructions the \
observing part of you follows; you receive everything it wrote. Rewrite the whole log: \
reorganise it, merge related lines, draw connections, and notice whether the assistant went off \
track and how it got back. What you write REPLACES the log entirely — whatever you leave out is \
forgotten."""

_REFLECTOR_RULES = """How to condense:
- Keep dates and the times that matter; keep names, places, numbers and decisions.
- Merge repeated actions into one line ("ran the tests 5 times on file x").
- Keep ✅ markers with their concrete outcome.
- Condense old material harder than recent material; keep recent detail.
- What the user stated outranks what the user asked."""

_REFLECTOR_HINTS = """After </observations>, add:
<suggested-response>
A short hint for the assistant's very next message.
</suggested-response>"""

# What each compression level asks for; the headings (a contract the scripted reflector reads)
# and the detail targets come from reflection_plan.COMPRESSION_GUIDANCE.
_LEVEL_ADVICE: dict[int, str] = {
    1: "Your last reflection was not smaller than its input. Condense the beginning more, keep "
       "recent detail, merge tool calls, keep names, places and people and every ✅.",
    2: "Compress much harder: one arc per file or topic, no redundancy.",
    3: "Turn the oldest 50-70 % into short paragraphs; drop procedural steps and superseded "
       "facts; keep names, dates, decisions, errors, preferences and architecture.",
    4: "Collapse every tool sequence into its outcome; at most two or three date groups per day; "
       "one or two lines per old topic; only the final state.",
}


def reflector_system_prompt(*, continuation_hints: bool = True, instruction: str | None = None) -> str:
    return _system_prompt([
        _REFLECTOR_ROLE,
        f"<observational-memory-instruction>\n{_INSTRUCTIONS}\n</observational-memory-instruction>",
        _REFLECTOR_RULES, _FORMAT, _SINGLE_THREAD,
    ], _REFLECTOR_HINTS if continuation_hints else None, instruction)


def reflector_user_prompt(*, observations: str, level: int, guidance: str | None = None,
                          continuation_hints: bool = True) -> str:
    """The log to rewrite, then the request, manual guidance and the compression level's heading."""
    prompt = (
        f"## OBSERVATIONS TO REFLECT ON\n\n{observations}\n\n---\n\n"
        "Write a refined, condensed version of these observations. It becomes the entire memory."
    )
    if guidance:
        prompt += f"\n\n## SPECIFIC GUIDANCE\n\n{guidance}"
    if level in COMPRESSION_GUIDANCE:
        heading, detail = COMPRESSION_GUIDANCE[level]
        prompt += f"\n\n{heading}\n\n{_LEVEL_ADVICE[level]} Aim for about {detail} of the detail."
    if not continuation_hints:
        prompt += "\n\nOutput <observations> every time."
    return prompt
