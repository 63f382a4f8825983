"""`om drop`: delete a version from the broker: its topics, its consumer group, its registration.

The input log, the model-result cache and the registry are shared by every version and stay;
the version's local state (under the data directory) is the caller's to remove.
"""

from __future__ import annotations

import contextlib

from .. import kafka
from ..settings import Settings
from ..topics import Topics
from ..versions.registry import forget

__all__ = ["drop_version"]


async def drop_version(settings: Settings) -> list[str]:
    """Delete the version of `settings` (its events, jobs, dead letters and state changelog, its
    group) and forget it in the registry; the topics that existed and were deleted."""
    topics = Topics.of(settings)
    names = [topics.events, topics.jobs, topics.dlq, topics.state_changelog(settings.app_id)]
    admin = kafka.admin(settings)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        gone = [n for n in names if n in existing]
        if gone:
            await admin.delete_topics(gone)
        # A group that never committed does not exist.
        with contextlib.suppress(Exception):
            await admin.delete_consumer_groups([settings.app_id])
    finally:
        await admin.close()
    await forget(settings, settings.version)
    return gone
