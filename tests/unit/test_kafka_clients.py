"""Every client is built by `omstream.kafka`, with the options its use needs."""

from __future__ import annotations

import aiokafka
import aiokafka.admin
import pytest

from omstream import kafka
from omstream.settings import Settings


@pytest.fixture
def built(monkeypatch):
    """The arguments each aiokafka client class was called with, instead of a client."""
    calls: list[tuple[str, tuple, dict]] = []
    for module, name in ((aiokafka, "AIOKafkaConsumer"), (aiokafka, "AIOKafkaProducer"),
                         (aiokafka.admin, "AIOKafkaAdminClient")):
        monkeypatch.setattr(module, name, lambda *a, _name=name, **k: calls.append((_name, a, k)))
    return calls


def test_each_use_gets_its_options(built):
    settings = Settings(bootstrap="host:1")
    kafka.reader(settings, "t", auto_offset_reset="earliest")
    kafka.group_reader("other:2", "g")
    kafka.idempotent_producer(settings)
    kafka.acked_producer(settings)
    kafka.producer("other:2")
    kafka.admin(settings)
    kafka.admin(settings, request_timeout_ms=kafka.TOPICS_TIMEOUT_MS)
    assert built == [
        ("AIOKafkaConsumer", ("t",), {"bootstrap_servers": "host:1", "group_id": None, "enable_auto_commit": False,
                                      "auto_offset_reset": "earliest"}),
        ("AIOKafkaConsumer", (), {"bootstrap_servers": "other:2", "group_id": "g", "enable_auto_commit": False}),
        ("AIOKafkaProducer", (), {"bootstrap_servers": "host:1", "acks": "all", "enable_idempotence": True}),
        ("AIOKafkaProducer", (), {"bootstrap_servers": "host:1", "acks": "all"}),
        ("AIOKafkaProducer", (), {"bootstrap_servers": "other:2"}),
        ("AIOKafkaAdminClient", (), {"bootstrap_servers": "host:1"}),
        ("AIOKafkaAdminClient", (), {"bootstrap_servers": "host:1", "request_timeout_ms": 15_000}),
    ]
