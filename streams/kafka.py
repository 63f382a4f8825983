"""Every Kafka client omstream makes outside the Faust worker, built in one place.

The clients are aiokafka's.  Each builder is named for a use, and the options that use needs
are written here once:

- `reader`: a consumer in no group, for a process that assigns itself partitions and seeks
  (a projection, `om tail`, `om export`, the result cache, progress watches): it commits nothing,
  so any number of them read a topic without touching the workers' groups or each other;
- `group_reader`: a consumer of a named group that commits only what it is told to (`om replay
  --from` placing a new version's group, the broker's readiness probe);
- `idempotent_producer` (`OmClient`: the agent's writes to the input log, each once and in
  order), `acked_producer` (the version registry: acknowledged by every in-sync replica) and
  `producer` (aiokafka's defaults: a probe, a bench);
- `admin`: topics, groups and offsets.

A builder takes the `Settings` of the caller, or a bootstrap address where there is none (the
local broker's readiness probe, which runs before any settings exist).  The clients are
imported when one is built, so importing this module costs nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient

    from .settings import Settings

__all__ = ["PROBE_TIMEOUT_MS", "TOPICS_TIMEOUT_MS", "acked_producer", "admin", "bootstrap_of", "group_reader",
           "idempotent_producer", "producer", "reader"]

#: Admin requests about topics (create, describe): a broker that has just started may be slow.
TOPICS_TIMEOUT_MS = 15_000
#: The readiness probe's admin requests: it asks again every half second until a deadline.
PROBE_TIMEOUT_MS = 5_000


def bootstrap_of(where: Settings | str) -> str:
    """The bootstrap address of the settings, or the address itself."""
    return where if isinstance(where, str) else where.bootstrap


def reader(where: Settings | str, *topics: str, **options: Any) -> AIOKafkaConsumer:
    """A consumer in no group that commits nothing (`options`: aiokafka's, e.g. where to start
    or the isolation level).  Without a group aiokafka never commits; the flag says so here."""
    from aiokafka import AIOKafkaConsumer

    return AIOKafkaConsumer(*topics, bootstrap_servers=bootstrap_of(where), group_id=None,
                            enable_auto_commit=False, **options)


def group_reader(where: Settings | str, group_id: str, *topics: str, **options: Any) -> AIOKafkaConsumer:
    """A consumer of the group `group_id` that commits only by `commit()`."""
    from aiokafka import AIOKafkaConsumer

    return AIOKafkaConsumer(*topics, bootstrap_servers=bootstrap_of(where), group_id=group_id,
                            enable_auto_commit=False, **options)


def producer(where: Settings | str, **options: Any) -> AIOKafkaProducer:
    """A producer with aiokafka's defaults (acknowledged by the leader), and `options`."""
    from aiokafka import AIOKafkaProducer

    return AIOKafkaProducer(bootstrap_servers=bootstrap_of(where), **options)


def acked_producer(where: Settings | str) -> AIOKafkaProducer:
    """A producer whose sends are acknowledged once every in-sync replica has them."""
    return producer(where, acks="all")


def idempotent_producer(where: Settings | str) -> AIOKafkaProducer:
    """An acknowledged producer whose retries neither duplicate nor reorder a partition's records:
    the input log's order is the order the fold applies."""
    return producer(where, acks="all", enable_idempotence=True)


def admin(where: Settings | str, *, request_timeout_ms: int | None = None) -> AIOKafkaAdminClient:
    """An admin client; `request_timeout_ms` None keeps aiokafka's default."""
    from aiokafka.admin import AIOKafkaAdminClient

    timeout = {} if request_timeout_ms is None else {"request_timeout_ms": request_timeout_ms}
    return AIOKafkaAdminClient(bootstrap_servers=bootstrap_of(where), **timeout)
