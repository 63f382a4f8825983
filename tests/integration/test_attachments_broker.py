"""Attachments reach the Observer model on the real broker, as `observeAttachments` allows (§7.2).

The scripted multimodal observer (`scripted/observer-vision`) writes a line for each attachment
it received, so the observations themselves tell what the model agent sent it.
"""

import asyncio
from datetime import timedelta

import pytest

from omstream.client import OmClient
from omstream.schemas.messages import Message
from tests.helpers import T0
from tests.integration.options import om_options
from tests.integration.support import EventWatcher

pytestmark = pytest.mark.integration

OPTIONS = om_options(observation={"model": "scripted/observer-vision", "messageTokens": 100000, "bufferTokens": False,
                                  "observeAttachments": ["image/*"]})
PDF = "JVBERi0xLjQKJcOkw7zDtsOfCjIgMCBvYmoK"


def test_the_observer_model_receives_the_allowed_attachments_with_their_placeholders(new_env):
    env = new_env(options=OPTIONS)
    env.start_worker()
    shared = Message.model_validate({
        "id": "m0", "threadId": "pics", "resourceId": "u1", "role": "user", "createdAt": T0.isoformat(),
        "content": [{"type": "text", "text": "here is my cat and the vet's bill"},
                    {"type": "image", "image": "https://x.test/cat.png"},
                    {"type": "file", "data": PDF, "mimeType": "application/pdf", "filename": "bill.pdf"}]})
    reply = Message(id="m1", thread_id="pics", resource_id="u1", role="assistant", content="a lovely cat",
                    created_at=T0 + timedelta(minutes=1))

    async def scenario():
        async with OmClient(env.settings) as client, EventWatcher(env.settings) as watch:
            await client.send_messages([shared, reply])
            await client.observe("pics")
            evs = await watch.wait_for(
                lambda evs: any(e.type in ("data-om-observation-end", "data-om-observation-failed") for e in evs),
                timeout=120)
        return [e for e in evs if e.type == "data-om-observation-end"]

    ends = asyncio.run(scenario())
    assert ends, env.logs()
    observations = ends[0].data.observations
    assert "Attachment received: [Image #1: cat.png] image_url https://x.test/cat.png" in observations
    assert observations.count("Attachment received") == 1  # the PDF is not allowed
    assert "User said: here is my cat and the vet's bill" in observations
