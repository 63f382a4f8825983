"""The version registry's records keep their bytes; a replay's figures keep their shape."""

from __future__ import annotations

import orjson

from omstream.replay.replay import ReplayProgress, ReplayResult
from omstream.settings import LIVE, Settings
from omstream.versions import DefaultVersion, Registry, StatsSummary, VersionInfo, version_info
from omstream.versions.records import version_key, version_name


def test_a_version_record_has_the_bytes_it_always_had():
    info = VersionInfo("small", "d1g3st", "settled", {"observation": {"messageTokens": 500}}, ("t1", "t2"))
    # What `register` wrote before the record was a type: a dict dumped by orjson, in this order.
    assert info.to_bytes() == orjson.dumps({"name": "small", "digest": "d1g3st", "foldMode": "settled",
                                            "config": {"observation": {"messageTokens": 500}},
                                            "threads": ["t1", "t2"]})
    assert info.key == b"version:small" == version_key("small")
    assert VersionInfo.from_bytes("small", info.to_bytes()) == info


def test_a_record_written_before_versions_named_threads_folds_every_thread():
    old = orjson.dumps({"name": "a", "digest": "x", "foldMode": "follow", "config": {}})
    assert VersionInfo.from_bytes("a", old).threads == ()


def test_the_default_record_has_the_bytes_it_always_had():
    assert DefaultVersion("small").to_bytes() == b'{"version":"small"}'
    assert DefaultVersion.key == b"default"
    assert DefaultVersion.from_bytes(b'{"version":"small"}') == DefaultVersion("small")


def test_the_registry_applies_records_in_order_tombstones_included():
    registry = Registry()
    a = VersionInfo("a", "x", "follow", {})
    registry.apply(a.key, a.to_bytes())
    registry.apply(DefaultVersion.key, DefaultVersion("a").to_bytes())
    registry.apply(b"something-else", b"{}")  # a key of no kind this `om` knows: passed over
    assert registry.versions == {"a": a} and registry.default == "a"
    registry.apply(a.key, None)
    registry.apply(DefaultVersion.key, None)
    assert registry.versions == {} and registry.default == LIVE
    assert version_name(b"default") is None and version_name(b"version:a") == "a"


def test_version_info_names_the_threads_sorted():
    info = version_info(Settings(version="v2", fold_mode="settled", only_threads="b, a"))
    assert (info.name, info.fold_mode, info.threads) == ("v2", "settled", ("a", "b"))


def test_a_replay_prints_the_figures_in_the_order_it_always_did():
    progress = ReplayProgress(folded=10, total=10, memories=1, model_calls=0, cache_hits=0, records_per_s=5.0,
                              eta_s=0.0, elapsed_s=2.0, caught_up=True, fold_s=1.5, fold_records_per_s=6.7)
    result = ReplayResult("v2", "settled", progress, StatsSummary(model_calls=3, cache_hits=4, cost_usd=0.01,
                                                                   memories=2, observation_tokens=50, generations=1))
    figures = result.to_json()
    assert list(figures) == ["folded", "total", "memories", "modelCalls", "cacheHits", "recordsPerS", "etaS",
                             "elapsedS", "caughtUp", "foldS", "foldRecordsPerS", "version", "foldMode", "costUsd",
                             "observationTokens", "generations"]
    # The worker's figures, read last, replace the progress figures of the same name.
    assert (figures["memories"], figures["modelCalls"], figures["cacheHits"]) == (2, 3, 4)
    assert "foldS" not in ReplayProgress(0, 0, 0, 0, 0, 0.0, 0.0, 0.0).to_json()
