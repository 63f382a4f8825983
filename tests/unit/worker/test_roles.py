"""`om worker --role`: what each role's app subscribes, and what a fold worker never imports."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from omstream.settings import SettingsError, load_settings

REPO = Path(__file__).resolve().parents[3]


def build(tmp_path: Path, role: str, extra: str = "") -> str:
    """Build the worker app of `role` in a fresh interpreter; what it prints."""
    config = tmp_path / "om.toml"
    config.write_text(f'[omstream]\nnamespace = "roles"\ndata_dir = "{tmp_path / "data"}"\n'
                      f'result_key = "k"\n{extra}')
    script = textwrap.dedent(f"""
        import sys
        from dataclasses import replace
        from omstream.settings import load_settings
        from omstream.worker.app import build_app
        settings = replace(load_settings({str(config)!r}, env={{}}), role={role!r})
        app = build_app(settings)
        topics = sorted(t for agent in app.agents.values() for t in agent.channel.topics)
        print("agents", sorted(app.agents))
        print("topics", topics)
        print("tables", sorted(app.tables))
        print("group", app.conf.id)
        print("metadata max age", app.conf.consumer_metadata_max_age_ms)
        print("table manager", type(app.tables).__name__)
        if {role!r} == "fold":  # "auto" attachments: litellm's table, read in a child process
            from omstream.worker.capability import takes_attachments_apart
            print("vision", takes_attachments_apart("openai/gpt-4o"), takes_attachments_apart("local/qwen2.5-1.5b"))
        print("litellm", "litellm" in sys.modules)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_a_fold_worker_folds_alone_and_never_imports_litellm(tmp_path):
    out = build(tmp_path, "fold")
    assert "agents ['fold']" in out and "topics ['roles.log']" in out
    # A leader that assigned nothing while a restarted broker did not yet report the topics
    # rejoins at its next metadata refresh: seconds, not Faust's default of 5 minutes.
    assert "metadata max age 10000" in out
    assert "tables ['state']" in out and "group omstream-roles\n" in out
    assert "vision True False" in out and "litellm False" in out


def test_a_model_worker_answers_jobs_in_a_group_of_its_own_without_state(tmp_path):
    out = build(tmp_path, "models")
    assert "agents ['models']" in out and "topics ['roles.jobs']" in out
    assert "tables []" in out and "group omstream-roles-models\n" in out


def test_an_all_worker_is_what_it_was(tmp_path):
    out = build(tmp_path, "all")
    assert "agents ['fold', 'models']" in out and "topics ['roles.jobs', 'roles.log']" in out
    assert "tables ['state']" in out and "group omstream-roles\n" in out


def test_the_role_is_a_setting(tmp_path):
    assert load_settings(env={"OM_ROLE": "fold"}).role == "fold"
    assert load_settings(env={}).role == "all"
    with pytest.raises(SettingsError, match="OM_ROLE: expected one of 'all', 'fold', 'models'"):
        load_settings(env={"OM_ROLE": "folder"})
    assert load_settings(env={"OM_ROLE": "models"}).worker_group == "omstream-om-models"


def test_compose_scales_fold_workers_and_model_agents_as_services_of_their_own():
    import yaml

    services = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    assert services["fold"]["command"] == ["worker", "--role", "fold"]
    assert services["models"]["command"] == ["worker", "--role", "models"]
    for name in ("fold", "models"):  # one key for all of them, and not started with the single worker
        assert "OM_RESULT_KEY" in services[name]["environment"] and services[name]["profiles"] == ["scaled"]
    assert "profiles" not in services["worker"]
