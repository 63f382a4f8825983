"""What the Observer is asked (spec §7.1, §7.3, §7.4), in omstream's own words.

The headings and tags are a contract: parsers, the scripted models and users rely on
`## Previous Observations`, `## New Message History to Observe`, `## Your Task`, the
`<observations>` block and the `<current-task>` / `<suggested-response>` sections.
"""

from __future__ import annotations

import re

from .transcript import DATE_HEADER, clock24
from .truncation import TRUNCATION_NOTICE

__all__ = [
    "COMPRESSION_GUIDANCE",
    "FORMAT_EXAMPLE_DATES",
    "FORMAT_EXAMPLE_LINES",
    "FORMAT_EXAMPLE_SECTIONS",
    "observer_system_prompt",
    "observer_user_prompt",
    "reflector_system_prompt",
    "reflector_user_prompt",
]

# Written for small models too (a 1.5B model on a CPU reads ~50 tokens/s): short, one rule a
# line, and a worked example that is visibly about another conversation, with its input, so the
# model learns where the dates and times come from instead of copying the example's own.
_ROLE = """You are the memory of an AI assistant. You read its new messages and write down, as \
short notes called observations, what it must remember. Anything you do not write down is \
forgotten."""

_INSTRUCTIONS = """Rules:
- Write about the new messages only. Every fact gets its own line: * <priority> (<HH:MM>) <fact>
- Priority: 🔴 what the user states about themselves, their plans, wishes, goals and dates; 🟡 \
details, the assistant's answers and suggestions, tool results; 🟢 minor or uncertain; ✅ \
something finished or confirmed.
- Time: the time of the message the fact comes from, in 24-hour form (PM adds 12 hours). A \
message without a time has the time of the one before it. Never invent a time.
- Start with the date line "Date: <month> <day>, <year>" of the messages.
- Write "User stated ..." for facts, "User asked ..." for questions, "User will ..." for plans; \
say what changed ("now X, was Y"). Keep names, places, numbers and dates; quote unusual words.
- Keep what the assistant proposed: names, counts, list items.
- Tool work: one line, steps as sub-bullets "  * -> ...". Finished work: "  * ✅ ...".
- Write each fact once, 2 to 8 lines in all, then stop."""

_EXAMPLE_INPUT = """Mar 9 2024:
User (9:15 PM): My cat Miso is three and allergic to chicken. I feed her twice a day.
Assistant: Then pick a salmon or duck food; Feline Fresh and Purr Basics both sell one."""

_EXAMPLE_OUTPUT = """<observations>
Date: Mar 9, 2024
* 🔴 (21:15) User stated their cat Miso is three, allergic to chicken, fed twice a day
* 🟡 (21:15) Assistant suggested salmon or duck food from Feline Fresh or Purr Basics
</observations>"""

_EXAMPLE_HINTS = """<current-task>
Primary: choose a chicken-free food for Miso
</current-task>
<suggested-response>
Ask which of the two brands Miso likes
</suggested-response>"""


def _format(hints: bool) -> str:
    answer = f"{_EXAMPLE_OUTPUT}\n{_EXAMPLE_HINTS}" if hints else _EXAMPLE_OUTPUT
    return f"""Example, from ANOTHER conversation (never copy its content, times or date):
Messages:
{_EXAMPLE_INPUT}
Answer:
{answer}"""


#: The content of every format-example line these prompts show or have shown: the parser drops
#: an observation that copies one (a small model copies examples when unsure).
FORMAT_EXAMPLE_LINES: tuple[str, ...] = (
    "User stated their cat Miso is three, allergic to chicken, fed twice a day",
    "Assistant suggested salmon or duck food from Feline Fresh or Purr Basics",
    # the earlier example (and the spec's, §7.4)
    "User prefers direct answers",
    "Working on feature X",
    "User might prefer dark mode",
    "Agent debugging auth issue",
    "ran git status, found 3 modified files",
    "Tests passing, auth issue resolved",
    "Continued work on feature X",
)

#: The <current-task> / <suggested-response> texts of the examples and templates these prompts
#: show or have shown: a section that only copies one of them is dropped by the parser.
FORMAT_EXAMPLE_SECTIONS: tuple[str, ...] = (
    "Primary: choose a chicken-free food for Miso",
    "Ask which of the two brands Miso likes",
    # the earlier templates
    "A short hint for the assistant's very next message, e.g. to pause for the user when needed.",
    "The task in progress: \"Primary: ...\" and, if any, \"Secondary: ...\". Put a new question or "
    "request from the user first; say \"waiting for user\" when the user must decide.",
    "Primary: what the user wants now (a new request first). Add \"waiting for user\" if the user "
    "must decide.",
    "One line: what the assistant should do in its next message.",
)

#: The dates of those examples ("Date: <this>" lines).
FORMAT_EXAMPLE_DATES: tuple[str, ...] = ("Mar 9, 2024", "Dec 4, 2025", "Dec 5, 2025")

_HINTS = """After the </observations> line, add <current-task> (Primary: the user's current \
request; "waiting for user" if the user must decide) and <suggested-response> (what the \
assistant should do next){example}."""

_SINGLE_THREAD = "This is one conversation: write no thread ids and no <thread> tags."

# Resource scope (spec §6.10, §7.4): several conversations of one user in one request.
_MULTI_THREAD = """These are several conversations of the same user, each inside <thread id="..."> \
and </thread>. Inside your <observations> block write one <thread id="..."> section per \
conversation, with the same id, holding that conversation's Date line and observations, and end \
it with </thread>. Never mix facts of two conversations in one section."""

_MULTI_THREAD_TITLE = """Inside each thread section, before its </thread>, add <thread-title> \
with a short title for that conversation, 3 to 8 words, in the user's language; keep its prior \
title unless the topic has changed substantially."""

_MULTI_THREAD_HINTS = """Inside each thread section, before its </thread>, add that \
conversation's <current-task> (Primary: the user's current request; "waiting for user" if the \
user must decide) and <suggested-response> (what the assistant should do next)."""

_REFLECTOR_THREADS = """The log holds <thread id="..."> sections, one per conversation of the \
user. Keep a thread section (with its id) for what belongs to that conversation; write what \
holds for every conversation (the user's own facts and preferences) before the sections."""


def _system_prompt(parts: list[str], hints: str | None, instruction: str | None) -> str:
    """The sections, the hint sections when asked for, then the user's custom instructions."""
    prompt = "\n\n".join([*parts, hints] if hints else parts)
    if instruction:
        prompt += f"\n\n=== CUSTOM INSTRUCTIONS ===\n\n{instruction}"
    return prompt


def observer_system_prompt(*, continuation_hints: bool = True, instruction: str | None = None,
                           multi_thread: bool = False, thread_title: bool = False, example: bool = True) -> str:
    """The Observer's system prompt; `example=False` leaves out the worked example, for a model
    whose answer a grammar holds to the format (`ResolvedModel.constrained`)."""
    if multi_thread:
        parts = [_ROLE, _INSTRUCTIONS, *([_format(False)] if example else []), _MULTI_THREAD,
                 *([_MULTI_THREAD_TITLE] if thread_title else [])]
        return _system_prompt(parts, _MULTI_THREAD_HINTS if continuation_hints else None, instruction)
    hints = _HINTS.format(example=", as in the example" if example else "")
    return _system_prompt([_ROLE, _INSTRUCTIONS, *([_format(continuation_hints)] if example else []), _SINGLE_THREAD],
                          hints if continuation_hints else None, instruction)


def observer_user_prompt(
    *,
    transcript: str,
    previous_observations: str = "",
    current_task: str | None = None,
    suggested_response: str | None = None,
    truncated: bool = False,
    prior_values: str = "",
) -> str:
    """Previous observations, prior hints and extracted values, the new history, then the task
    (one user message)."""
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
    if prior_values:
        prior.append(prior_values)
    if prior:
        blocks.append(
            "## Prior Thread Metadata\n\n" + "\n".join(prior)
            + "\n\nTreat these as continuity hints, not as facts to observe again."
        )
    blocks.append(f"## New Message History to Observe\n\n{transcript}")
    blocks.append(
        "## Your Task\n\nExtract new observations from the message history above. Do not repeat "
        "previous observations. Begin your answer with <observations> and the Date line."
        + _anchors(transcript) + (_first_new(transcript) if previous_observations else "")
    )
    return "\n\n---\n\n".join(blocks)


_CLOCK = re.compile(r"^[^:\n]*?\((\d{1,2}):(\d{2}) ([AP])M\):", re.MULTILINE)


def _first_new(transcript: str) -> str:
    """Where the new messages begin, quoted: a small model otherwise writes the previous
    observations out again instead of observing the new messages."""
    first = next((line for line in transcript.split("\n")  # a thread tag is no message
                  if line.strip() and not DATE_HEADER.match(line) and not line.startswith("<thread id=")), "")
    if not first:
        return ""
    words = first.split()
    quote = " ".join(words[:14]) + (" ..." if len(words) > 14 else "")
    return (f' The previous observations are saved already: write only facts from the new '
            f'messages, which start with "{quote}".')


def _anchors(transcript: str) -> str:
    """The dates and the span of times of the transcript, spelled as the output wants them, so
    a small model takes them from here rather than from the format example."""
    dates = list(dict.fromkeys(f"{m} {int(d)}, {y}" for m, d, y in DATE_HEADER.findall(transcript)))
    clocks = [(f"{int(h)}:{mm} {half}M", clock24(h, mm, half))
              for h, mm, half in _CLOCK.findall(transcript)]
    if not dates:
        return ""
    text = f' The messages are from {" and ".join(dates)}: write "Date: {dates[0]}"'
    if clocks:
        (first, first24), (last, last24) = clocks[0], clocks[-1]
        text += (f"; their time is {first}, write ({first24})" if first == last
                 else f"; their times run from {first} ({first24}) to {last} ({last24})")
    return text + "."


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

_REFLECTOR_FORMAT = f"""Output format (an example from ANOTHER memory: never copy its content; keep the \
dates and times of the observations you rewrite):
{_EXAMPLE_OUTPUT}"""

_REFLECTOR_HINTS = """After </observations>, add:
<suggested-response>
A short hint for the assistant's very next message.
</suggested-response>"""

#: Level → (heading, target detail) of §8.2; level 0 adds no guidance.  The headings are a
#: contract the scripted reflector reads; which level a call asks for is `reflection_plan`'s.
COMPRESSION_GUIDANCE: dict[int, tuple[str, str]] = {
    1: ("## COMPRESSION REQUIRED", "8/10"),
    2: ("## AGGRESSIVE COMPRESSION REQUIRED", "6/10"),
    3: ("## CRITICAL COMPRESSION REQUIRED", "4/10"),
    4: ("## EXTREME COMPRESSION REQUIRED", "2/10"),
}


# What each compression level asks for besides its heading and detail target.
_LEVEL_ADVICE: dict[int, str] = {
    1: "Your last reflection was not smaller than its input. Condense the beginning more, keep "
       "recent detail, merge tool calls, keep names, places and people and every ✅.",
    2: "Compress much harder: one arc per file or topic, no redundancy.",
    3: "Turn the oldest 50-70 % into short paragraphs; drop procedural steps and superseded "
       "facts; keep names, dates, decisions, errors, preferences and architecture.",
    4: "Collapse every tool sequence into its outcome; at most two or three date groups per day; "
       "one or two lines per old topic; only the final state.",
}


def reflector_system_prompt(*, continuation_hints: bool = True, instruction: str | None = None,
                            multi_thread: bool = False, example: bool = True) -> str:
    """The Reflector's system prompt; `example=False` as for the Observer's."""
    return _system_prompt([
        _REFLECTOR_ROLE,
        f"<observational-memory-instruction>\n{_INSTRUCTIONS}\n</observational-memory-instruction>",
        _REFLECTOR_RULES, *([_REFLECTOR_FORMAT] if example else []),
        _REFLECTOR_THREADS if multi_thread else _SINGLE_THREAD,
    ], _REFLECTOR_HINTS if continuation_hints else None, instruction)


def reflector_user_prompt(*, observations: str, level: int, guidance: str | None = None,
                          continuation_hints: bool = True, prior_values: str = "") -> str:
    """The log to rewrite, then the request, prior extracted values, manual guidance and the
    compression level's heading."""
    prompt = (
        f"## OBSERVATIONS TO REFLECT ON\n\n{observations}\n\n---\n\n"
        "Write a refined, condensed version of these observations. It becomes the entire memory."
    )
    if prior_values:
        prompt += f"\n\n## Prior Extracted Values\n\n{prior_values}"
    if guidance:
        prompt += f"\n\n## SPECIFIC GUIDANCE\n\n{guidance}"
    if level in COMPRESSION_GUIDANCE:
        heading, detail = COMPRESSION_GUIDANCE[level]
        prompt += f"\n\n{heading}\n\n{_LEVEL_ADVICE[level]} Aim for about {detail} of the detail."
    if not continuation_hints:
        prompt += "\n\nOutput <observations> every time."
    return prompt
