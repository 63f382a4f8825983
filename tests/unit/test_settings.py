import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from omstream.infra.broker import KAFKA_VERSION
from omstream.settings import SettingsError, env_problems, file_problems, load_settings, read_config_file

REPO = Path(__file__).resolve().parents[2]


def problems(path, env=None) -> list[str]:
    with pytest.raises(SettingsError) as caught:
        load_settings(path, env=env or {})
    return [str(p) for p in caught.value.problems]


def test_demo_settings_and_environment_overrides():
    settings = load_settings(REPO / "examples" / "demo.toml", env={"OM_WEB_PORT": "9999"})
    assert settings.namespace == "demo" and settings.web_port == 9999
    assert settings.om.observer_model == "local/qwen2.5-1.5b"
    assert settings.om.observation.message_tokens == 500
    assert settings.web_host == "127.0.0.1"


def test_unknown_runtime_setting_is_refused(tmp_path):
    bad = tmp_path / "om.toml"
    bad.write_text("[omstream]\nnamespaec = 'x'\n")
    with pytest.raises(ValueError, match="namespaec"):
        load_settings(bad, env={})
    assert problems(bad) == ["omstream.namespaec: unknown key (did you mean 'namespace'?)"]


def test_every_mistake_is_one_path_problem_line(tmp_path):
    bad = tmp_path / "om.toml"
    bad.write_text("[omstream]\nbrokr_port = 1\npartitions = 'x'\nweb_port = 70000\nnamespace = 'a b'\n"
                   "om = 1\n\n[observationalMemroy]\n\n[observationalMemory.observation]\n"
                   "messageTokens = 'x'\n")
    found = problems(bad, env={"OM_PARTITIONS": "x", "OM_RETRY_BASE_MS": "soon", "OM_WEBPORT": "1"})
    assert found[0].startswith("observationalMemroy: unknown table (did you mean 'observationalMemory'?)")
    assert "omstream.brokr_port: unknown key (did you mean 'broker_port'?)" in found
    assert "omstream.partitions: expected an integer, got 'x'" in found
    assert "omstream.web_port: expected a port number from 1 to 65535, got 70000" in found
    assert any(p.startswith("omstream.namespace: use letters, digits") for p in found)
    assert any(p.startswith("omstream.om: unknown key") for p in found)  # not settable: it is the table
    assert "OM_PARTITIONS: expected an integer, got 'x'" in found
    assert "OM_RETRY_BASE_MS: expected a number, got 'soon'" in found
    assert "OM_WEBPORT: unknown variable (did you mean 'OM_WEB_PORT'?); unset it" in found
    assert any(p.startswith("observation.messageTokens: ") for p in found)
    assert all("\n" not in p for p in found)


def test_booleans_are_not_numbers_and_numbers_are_not_strings(tmp_path):
    bad = tmp_path / "om.yaml"
    bad.write_text("omstream:\n  partitions: true\n  bootstrap: 9092\n  retry_base_ms: 50\n")
    assert problems(bad) == ["omstream.partitions: expected an integer, got True",
                             "omstream.bootstrap: expected a string, got 9092"]


@pytest.mark.parametrize("name, text, problem", [
    ("om.toml", "[omstream\n", "not valid TOML: "),
    ("om.yaml", "omstream: [\n", "not valid YAML: "),
    ("om.json", "{", "not valid JSON: "),
    ("om.ini", "x", "use a .toml, .yaml/.yml or .json configuration file"),
    ("om.json", "[1, 2]", "a settings file holds an [omstream] and an [observationalMemory] table"),
])
def test_unreadable_files_name_the_file(tmp_path, name, text, problem):
    path = tmp_path / name
    path.write_text(text)
    [line] = problems(path)
    assert line.startswith(f"{path}: {problem}") and "\n" not in line


def test_missing_file_and_directory(tmp_path):
    assert problems(tmp_path / "nope.toml") == [f"{tmp_path / 'nope.toml'}: no such file"]
    (tmp_path / "dir.toml").mkdir()
    assert problems(tmp_path / "dir.toml") == [f"{tmp_path / 'dir.toml'}: is a directory, not a settings file"]
    assert problems(None, env={"OM_CONFIG": str(tmp_path / "gone.json")}) == [
        f"{tmp_path / 'gone.json'}: no such file"]


def test_bootstrap_follows_the_broker_port_unless_set():
    assert load_settings(None, env={"OM_BROKER_PORT": "19092"}).bootstrap == "127.0.0.1:19092"
    env = {"OM_BROKER_PORT": "19092", "OM_BOOTSTRAP": "kafka:9092"}
    assert load_settings(None, env=env).bootstrap == "kafka:9092"
    assert load_settings(None, env={}).bootstrap == "127.0.0.1:9092"


def test_config_check_helpers_accept_bare_options():
    assert file_problems({"observation": {"messageTokens": 10}}) == []  # bare options: not a settings file
    assert file_problems(True) == []
    assert [str(p) for p in file_problems({"omstream": {"namespace": 1}, "observationalMemory": {}})] == [
        "omstream.namespace: expected a string, got 1"]
    assert env_problems({"OM_CONFIG": "x.toml", "OMP_NUM_THREADS": "2"}) == []


def test_read_config_file_keeps_booleans(tmp_path):
    (tmp_path / "off.yaml").write_text("false\n")
    assert read_config_file(tmp_path / "off.yaml") is False


def test_docker_compose_reads_the_same_settings_as_the_scripts():
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    settings = load_settings(REPO / "infra" / "compose.toml", env={})
    kafka = compose["services"]["kafka"]["environment"]
    assert kafka["KAFKA_ADVERTISED_LISTENERS"] == f"PLAINTEXT://{settings.bootstrap}"
    assert compose["services"]["web"]["ports"] == [f"127.0.0.1:{settings.web_port}:{settings.web_port}"]


def test_docker_compose_runs_the_kafka_release_of_the_pom():
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    pom = ET.parse(REPO / "infra" / "kafka" / "pom.xml").getroot()
    pom_version = pom.find("{http://maven.apache.org/POM/4.0.0}properties/"
                           "{http://maven.apache.org/POM/4.0.0}kafka.version").text
    assert pom_version == KAFKA_VERSION
    assert compose["services"]["kafka"]["image"] == f"apache/kafka:{KAFKA_VERSION}"


def test_input_limits_and_job_deadline_have_defaults_and_overrides(tmp_path):
    defaults = load_settings(None, env={})
    assert (defaults.max_record_bytes, defaults.max_depth, defaults.max_parts, defaults.max_text_chars,
            defaults.max_clock_skew_ms, defaults.max_held, defaults.job_deadline_ms) == (
        524288, 64, 200, 100_000, 300_000, 10_000, 300_000)
    path = tmp_path / "om.toml"
    path.write_text("[omstream]\nmax_depth = 16\nmax_held = 0\nmax_clock_skew_ms = -1\n")
    assert problems(path, env={"OM_MAX_PARTS": "x"}) == [
        "omstream.max_held: must be at least 1, got 0",
        "omstream.max_clock_skew_ms: must not be negative, got -1",
        "OM_MAX_PARTS: expected an integer, got 'x'"]
    settings = load_settings(None, env={"OM_MAX_DEPTH": "16", "OM_JOB_DEADLINE_MS": "500"})
    assert settings.max_depth == 16 and settings.job_deadline_ms == 500
