"""Formatting a broker data directory (Kafka's StorageTool, from the Maven jars; no broker runs)."""

import base64
import os

import pytest

from omstream.infra.broker import Broker, free_port, new_cluster_id

pytestmark = pytest.mark.integration


def _dash_cluster_id() -> str:
    """A valid cluster id whose text begins with '-' (a first byte of 0xF8..0xFB is 62 = '-')."""
    text = base64.urlsafe_b64encode(b"\xf8" + os.urandom(15)).rstrip(b"=").decode()
    assert text.startswith("-")
    return text


def test_a_cluster_id_beginning_with_a_dash_formats(tmp_path):
    broker = Broker(tmp_path / "broker", port=free_port(), controller_port=free_port())
    cluster_id = _dash_cluster_id()
    assert broker.format(cluster_id) == cluster_id
    meta = (broker.data_dir / "logs" / "meta.properties").read_text()
    assert f"cluster.id={cluster_id}\n" in meta
    assert broker.formatted() and broker.pid() is None


def test_generated_cluster_ids_never_begin_with_a_dash(tmp_path):
    ids = [new_cluster_id() for _ in range(2000)]
    assert not any(i.startswith("-") for i in ids)
    assert all(len(base64.urlsafe_b64decode(i + "==")) == 16 for i in ids)
    broker = Broker(tmp_path / "broker", port=free_port(), controller_port=free_port())
    assert f"cluster.id={broker.format()}\n" in (broker.data_dir / "logs" / "meta.properties").read_text()
