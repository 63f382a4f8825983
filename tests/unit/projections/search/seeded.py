"""The seeded conversation of tests/fixtures/search/conversation.json as the fold's events.

Until the engine emits observation groups, each batch's observation lines are wrapped here in
the group format (what a scripted observer's cycle will produce after the merge)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.unit.projections.search.events import Memory, group, group_id

FIXTURE = Path(__file__).resolve().parents[3] / "fixtures" / "search" / "conversation.json"


def seeded(memory_key: str = "thread:seeded", thread_id: str = "seeded") -> tuple[list[Any], list[dict], dict[str, str]]:
    """(events, questions, group name -> group id)."""
    data = json.loads(FIXTURE.read_text())
    memory = Memory(memory_key, thread_id)
    index = {m["id"]: i for i, m in enumerate(data["messages"])}
    events, ids, done = [], {}, 0
    for batch in data["batches"]:
        last = index[batch["last"]]
        events += [memory.message(i, m["content"], m["role"]) for i, m in
                   enumerate(data["messages"][done:last + 1], start=done)]
        done = last + 1
        ids[batch["group"]] = group_id(memory_key, batch["group"])
        events.append(memory.observed(group(ids[batch["group"]], f"{thread_id}-m{index[batch['first']]}",
                                            f"{thread_id}-m{last}", batch["observations"])))
    return events, data["questions"], ids
