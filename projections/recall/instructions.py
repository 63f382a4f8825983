"""The recall guidance the actor's context carries with retrieval on (spec §10, §12), and the
tool's usage text: our own words, shaped by the tool's scope and by whether search is on."""

from __future__ import annotations

__all__ = ["recall_instructions"]

_INTRO = """## Recall: reading the messages behind your observations

Your observations are a summary. Groups of them come with a range of message ids, the `_range:`
line under each `## Group` heading (in the raw form, `<observation-group range="startId:endId">`):
the first and last of the original messages that group was written from. Those messages are
still kept, and the **recall** tool reads them.

### When to recall
- The user wants something repeated, shown or quoted from earlier.
- The answer needs an exact detail: code, wording, numbers, names, links, file paths, errors.
- An observation mentions something but not enough of it to answer well.
- You want to check an observation before relying on it.{resource_when}

When the user points at specific earlier content, recall it rather than answer from the summary."""

_RESOURCE_WHEN = """
- The user refers to another conversation, even one your observations do not cover yet."""

_MODES_RESOURCE = """### Choosing a mode
recall reaches every conversation thread of this user, not only this one.
{search}- `mode: "messages"`: read a thread whose id you know (`threadId`), or page from a message id
  (`cursor`) taken from a range{search_cursor}.
- `mode: "threads"`: list the user's threads with their ids, titles and dates; `before` and `after`
  narrow them by creation date.

{fallback}"""

_SEARCH_LINE = """- `mode: "search"` with a `query`: find where something was discussed when you do not know the
  thread. Each result names its thread and the message ids it came from.
"""
_FALLBACK_SEARCH = """If search finds nothing useful, do not conclude the information is gone: recent or short
conversations may not be indexed yet. List the threads, pick likely ones by title and date, and read
them with `mode: "messages"`."""
_FALLBACK_BROWSE = """When the user mentions a past conversation you have no range for, list the threads, pick likely
ones by title and date, and read them with `mode: "messages"`: a thread can hold messages that no
observation covers yet."""

_MODES_THREAD = """### Choosing a mode
recall reads this conversation thread only.
- `mode: "messages"` (the default): page through this thread's messages from a `cursor`, or from
  its start or end (`anchor`).{search}
- `mode: "threads"`: this thread's id, title and dates."""

_USAGE = """### Paging from a cursor
A range is `startId:endId`: pass ONE of the two ids as `cursor`, never the whole range.
1. Pick the group that matches the question and take the start or end id of its range.
2. Call recall with that id as `cursor`; `page: 1` (the default) reads forward, `page: -1` backward.
3. Go on with `page: 2`, `page: -2`, ... while `hasNextPage` / `hasPrevPage` say there is more.

### Detail
The default, `detail: "low"`, shortens each part and shows tool names only. Every message shows its
id, and every part an index: `[p0]`, `[p1]`, ...
- `detail: "high"` gives one part in full (tool arguments and results included) per call, and says
  how to reach the next one.
- `cursor` plus `partIndex` fetches exactly that part in full.

A shortened part ends with a hint such as `[recall cursor="..." partIndex=N detail="high" for more]`:
when you need the full text, make exactly that call. A result with `truncated: true` was cut to fit
its budget: page on, or fetch single parts. A part too long for one answer comes back with
`nextCharOffset`: repeat the same call with `charOffset` set to that value, and keep going until
no `nextCharOffset` is returned.

### When not to recall
- A summary is asked for and your observations already give it.
- The question is about general preferences or facts that need no source text.
{not_needed}"""

_NOT_NEEDED_RESOURCE = ("- Nothing relevant turned up in the ranges{search_or} or the thread list; but threads without "
                        "observations still hold messages, so look before you say it is not there.")
_NOT_NEEDED_THREAD = "- No range in your observations is about the topic."


def recall_instructions(scope: str = "resource", *, search: bool = False, custom: str | None = None) -> str:
    """The guidance for a recall tool of `scope` (`thread` or `resource`); `custom` (the
    configuration's `retrieval.instructions`) follows under its own heading, never replacing it."""
    resource = scope == "resource"
    intro = _INTRO.format(resource_when=_RESOURCE_WHEN if resource else "")
    if resource:
        modes = _MODES_RESOURCE.format(
            search=_SEARCH_LINE if search else "",
            search_cursor=" or from a search result" if search else "",
            fallback=_FALLBACK_SEARCH if search else _FALLBACK_BROWSE)
        not_needed = _NOT_NEEDED_RESOURCE.format(search_or=", the search" if search else "")
    else:
        modes = _MODES_THREAD.format(
            search="\n- `mode: \"search\"` with a `query`: find messages of this thread by meaning." if search else "")
        not_needed = _NOT_NEEDED_THREAD
    text = f"{intro}\n\n{modes}\n\n{_USAGE.format(not_needed=not_needed)}"
    extra = (custom or "").strip()
    return f"{text}\n\n### Additional recall guidance\n{extra}" if extra else text
