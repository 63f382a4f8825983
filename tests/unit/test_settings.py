from pathlib import Path

import pytest
import yaml

from omstream.settings import load_settings

REPO = Path(__file__).resolve().parents[2]


def test_demo_settings_and_environment_overrides():
    settings = load_settings(REPO / "examples" / "demo.toml", env={"OM_WEB_PORT": "9999"})
    assert settings.namespace == "demo" and settings.web_port == 9999
    assert settings.om.observer_model == "scripted/observer"
    assert settings.om.observation.message_tokens == 400
    assert settings.web_host == "127.0.0.1"


def test_unknown_runtime_setting_is_refused(tmp_path):
    bad = tmp_path / "om.toml"
    bad.write_text("[omstream]\nnamespaec = 'x'\n")
    with pytest.raises(ValueError, match="namespaec"):
        load_settings(bad, env={})


def test_docker_compose_reads_the_same_settings_as_the_scripts():
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    settings = load_settings(REPO / "infra" / "compose.toml", env={})
    kafka = compose["services"]["kafka"]["environment"]
    assert kafka["KAFKA_ADVERTISED_LISTENERS"] == f"PLAINTEXT://{settings.bootstrap}"
    assert compose["services"]["web"]["ports"] == [f"127.0.0.1:{settings.web_port}:{settings.web_port}"]
    assert compose["services"]["kafka"]["image"].startswith("apache/kafka:4.0")
