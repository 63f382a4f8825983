"""Which namespace a reader (`om tail`, `om dlq`, `om export`) reads: `--namespace`, else
OM_NAMESPACE or the settings file's, else the running demo's (said on stderr), else the default.
The broker is not asked: these are the settings alone."""

import argparse
import os

import pytest

from omstream.cli.namespaces import demo_record, forget_demo, reading_settings, record_demo, running_demo
from omstream.settings import Settings, load_settings


@pytest.fixture(autouse=True)
def own_state(tmp_path, monkeypatch):
    for name in [n for n in os.environ if n.startswith("OM_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def args(config=None, namespace=None) -> argparse.Namespace:
    return argparse.Namespace(command="tail", config=config, namespace=namespace, port=None)


def demo(namespace="demo-20261206-010203"):
    record_demo(Settings(namespace=namespace), "http://127.0.0.1:8765")
    return namespace


def test_without_a_demo_the_configured_namespace_is_read(capsys):
    assert reading_settings(args()).namespace == "om"
    assert capsys.readouterr().err == ""


def test_the_running_demos_namespace_is_read_and_said(capsys):
    ns = demo()
    assert running_demo(load_settings().bootstrap).namespace == ns
    assert reading_settings(args()).namespace == ns
    assert capsys.readouterr().err == (f"om tail: reading namespace {ns} of the running om demo (pid {os.getpid()}); "
                                       "--namespace NS or OM_NAMESPACE for another\n")


def test_a_named_namespace_wins_over_the_demos(tmp_path, monkeypatch, capsys):
    demo()
    assert reading_settings(args(namespace="mine")).namespace == "mine"
    config = tmp_path / "om.toml"
    config.write_text('[omstream]\nnamespace = "filed"\n')
    assert reading_settings(args(config=str(config))).namespace == "filed"
    monkeypatch.setenv("OM_NAMESPACE", "env")
    assert reading_settings(args()).namespace == "env"
    assert capsys.readouterr().err == ""


def test_a_config_without_a_namespace_still_reads_the_demos(tmp_path):
    ns = demo()
    config = tmp_path / "om.toml"
    config.write_text("[omstream]\npartitions = 2\n")
    assert reading_settings(args(config=str(config))).namespace == ns


def test_a_demo_on_another_broker_or_gone_is_not_read(monkeypatch):
    demo()
    monkeypatch.setenv("OM_BOOTSTRAP", "127.0.0.1:19092")
    assert reading_settings(args()).namespace == "om"
    monkeypatch.delenv("OM_BOOTSTRAP")
    text = demo_record().read_text().replace(f'"pid": {os.getpid()}', '"pid": 4206649')
    demo_record().write_text(text)  # a pid above Linux's largest: no such process
    assert running_demo(load_settings().bootstrap) is None


def test_the_demo_removes_only_its_own_record():
    demo()
    forget_demo()
    assert not demo_record().exists()
    demo()
    demo_record().write_text(demo_record().read_text().replace(f'"pid": {os.getpid()}', '"pid": 1'))
    forget_demo()  # a later demo's record stays
    assert demo_record().exists()


def test_a_bad_namespace_name_is_refused():
    from omstream.cli.common import CommandError

    with pytest.raises(CommandError, match="not a namespace name"):
        reading_settings(args(namespace="a b"))
