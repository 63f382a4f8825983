"""`om config check`: a configuration file read, checked and printed resolved, every problem
reported with exit 1."""

from __future__ import annotations

import json

import pytest

from omstream.cli import main
from omstream.schemas.config import DEFAULT_MODEL


# --- om config check ------------------------------------------------------------------------------
def run_check(tmp_path, name: str, text: str, capsys) -> tuple[int, str, str]:
    path = tmp_path / name
    path.write_text(text)
    code = main(["config", "check", str(path)])
    out, err = capsys.readouterr()
    return code, out, err


def test_config_check_json_prints_resolved_values(tmp_path, capsys):
    text = json.dumps({"observationalMemory": {"model": "default"}})
    code, out, err = run_check(tmp_path, "om.json", text, capsys)
    assert code == 0 and err == ""
    resolved = json.loads(out)
    assert resolved["observation"]["bufferTokens"] == 6000
    assert resolved["observation"]["blockAfter"] == 36_000
    assert resolved["reflection"]["bufferStart"] == 20_000
    assert resolved["observation"]["model"]["settings"]["maxOutputTokens"] == 100_000


def test_config_check_toml_settings_file(tmp_path, capsys):
    text = ("[omstream]\nnamespace = 'x'\n\n[observationalMemory]\nscope = 'thread'\n\n"
            "[observationalMemory.observation]\nmessageTokens = 5000\nbufferTokens = false\n"
            "[observationalMemory.observation.model.upTo]\n10000 = 'a/small'\n")
    code, out, _ = run_check(tmp_path, "om.toml", text, capsys)
    assert code == 0
    resolved = json.loads(out)
    assert resolved["scope"] == "thread" and resolved["asyncBuffering"] is False
    assert resolved["observation"]["model"]["routing"] == "by-input-tokens"


def test_config_check_yaml_bare_options_and_booleans(tmp_path, capsys):
    code, out, _ = run_check(tmp_path, "om.yaml", "observation:\n  message_tokens: 8000\n", capsys)
    assert code == 0 and json.loads(out)["observation"]["bufferTokens"] == 1600
    code, out, _ = run_check(tmp_path, "off.yaml", "false\n", capsys)
    assert code == 0 and json.loads(out)["enabled"] is False
    code, out, _ = run_check(tmp_path, "on.json", "true", capsys)
    assert code == 0 and json.loads(out)["observation"]["model"]["name"] == DEFAULT_MODEL


def test_config_check_reports_every_error_and_exits_1(tmp_path, capsys):
    text = json.dumps({"observation": {"blockAfter": 0.5, "messageTokens": "x"}, "scope": "everywhere"})
    code, out, err = run_check(tmp_path, "bad.json", text, capsys)
    assert code == 1 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 3
    assert any(line.startswith("observation.blockAfter: ") and "such as 1.2" in line for line in lines)
    assert any(line.startswith("observation.messageTokens: ") for line in lines)
    assert any(line.startswith("scope: ") for line in lines)


def test_config_check_rule_error_and_unreadable_files(tmp_path, capsys):
    code, _, err = run_check(tmp_path, "rule.yaml", "shareTokenBudget: true\n", capsys)
    assert code == 1 and err.startswith("shareTokenBudget: ")
    code, _, err = run_check(tmp_path, "broken.toml", "observation = [\n", capsys)
    assert code == 1 and "broken.toml" in err
    code, _, err = run_check(tmp_path, "om.ini", "x", capsys)
    assert code == 1 and ".toml" in err
    assert main(["config", "check", str(tmp_path / "missing.json")]) == 1


def test_config_check_help(capsys):
    with pytest.raises(SystemExit) as caught:
        main(["config", "check", "--help"])
    assert caught.value.code == 0
    assert "resolved" in capsys.readouterr().out
