import asyncio

from omstream.infra.features import kafka_release


def test_the_harness_broker_is_kafka_4_0(broker):
    release = asyncio.run(kafka_release(broker.bootstrap))
    assert release.startswith("4.0-"), release
