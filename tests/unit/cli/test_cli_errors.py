"""`om` given a mistake: one `path: problem` line per mistake on stderr, exit 1, no traceback."""

import asyncio
import socket
import time

import pytest

from omstream.cli import build_parser, main
from omstream.infra.broker import free_port

TYPO = "[omstream]\nbrokr = 1\n"
COMMANDS = [["worker"], ["serve"], ["topics", "create"], ["broker", "status"], ["produce", "x.jsonl"],
            ["observe", "t1"], ["reflect", "t1"], ["tail"], ["demo", "--exit"], ["config", "check"],
            ["export", "--thread", "t1"]]


@pytest.fixture(autouse=True)
def no_om_environment(monkeypatch):
    import os

    for name in [n for n in os.environ if n.startswith("OM_")]:
        monkeypatch.delenv(name)


def run(argv, capsys) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
@pytest.mark.parametrize("before", [True, False], ids=["config-first", "config-after"])
def test_a_misspelt_key_stops_every_command(tmp_path, capsys, command, before):
    config = tmp_path / "om.toml"
    config.write_text(TYPO)
    argv = ["--config", config, *command] if before else [*command, "--config", config]
    code, out, err = run(argv, capsys)
    assert code == 1 and out == ""
    assert err == "omstream.brokr: unknown key (did you mean 'broker_port'?)\n"


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_bad_environment_variable_stops_every_command(tmp_path, capsys, monkeypatch, command):
    monkeypatch.setenv("OM_PARTITIONS", "x")
    config = tmp_path / "om.toml"
    config.write_text("[omstream]\nnamespace = 'n'\n")
    code, _, err = run(["--config", config, *command], capsys)
    assert code == 1 and err == "OM_PARTITIONS: expected an integer, got 'x'\n"


@pytest.mark.parametrize("name, text, problem", [
    ("missing.toml", None, "no such file"),
    ("om.toml", "[omstream\n", "not valid TOML: "),
    ("om.yaml", "a: [\n", "not valid YAML: "),
    ("om.json", "{", "not valid JSON: "),
])
def test_an_unreadable_file_is_named(tmp_path, capsys, name, text, problem):
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    for argv in (["worker", "--config", path], ["--config", path, "simulate", "c.jsonl"],
                 ["simulate", "c.jsonl", "--config", path], ["config", "check", path]):
        code, _, err = run(argv, capsys)
        assert code == 1 and err.startswith(f"{path}: {problem}") and err.count("\n") == 1, argv


def test_option_errors_of_a_settings_file_stop_the_commands_too(tmp_path, capsys):
    config = tmp_path / "om.toml"
    config.write_text("[observationalMemory.observation]\nmessageTokens = 'x'\nbufferTokenz = 1\n")
    code, _, err = run(["observe", "t1", "--config", config], capsys)
    lines = err.splitlines()
    assert code == 1 and len(lines) == 2 and "Traceback" not in err
    assert any(line.startswith("observation.messageTokens: ") for line in lines)
    assert any(line.startswith("observation.bufferTokenz: ") for line in lines)


def test_config_check_checks_the_omstream_table(tmp_path, capsys):
    config = tmp_path / "om.toml"
    config.write_text("[omstream]\nnamespace = 'n'\npartitions = 'two'\n\n"
                      "[observationalMemory.observation]\nmessageTokens = 500\n")
    code, out, err = run(["config", "check", config], capsys)
    assert (code, out) == (1, "")
    assert err == "omstream.partitions: expected an integer, got 'two'\n"
    config.write_text("[omstream]\nnamespace = 'n'\npartitions = 2\n")
    code, out, err = run(["config", "check", "--config", config], capsys)
    assert code == 0 and err == "" and out.startswith("{")


def test_global_options_before_or_after_the_command():
    parse = build_parser().parse_args
    assert parse(["worker"]).config is None and parse(["worker"]).log_level == "info"
    assert parse(["--config", "a.toml", "worker"]).config == "a.toml"
    assert parse(["worker", "--config", "a.toml"]).config == "a.toml"
    assert parse(["worker", "--log-level", "debug"]).log_level == "debug"
    assert parse(["--log-level", "warning", "tail", "--thread", "t"]).log_level == "warning"
    # simulate's --config is its option file; the global one stays the settings file
    args = parse(["--config", "settings.toml", "simulate", "c.jsonl", "--config", "om.yaml"])
    assert (args.config, args.options) == ("settings.toml", "om.yaml")
    args = parse(["simulate", "c.jsonl", "--log-level", "debug"])
    assert (args.config, args.options, args.log_level) == (None, None, "debug")


def test_an_unreachable_broker_is_one_line(tmp_path, capsys):
    config = tmp_path / "om.toml"
    config.write_text(f"[omstream]\nbootstrap = '127.0.0.1:{free_port()}'\n")
    for command in (["topics", "create"], ["observe", "t1"]):
        code, _, err = run(["--config", config, *command], capsys)
        assert code == 1 and err.count("\n") == 1, err
        assert "cannot reach the Kafka broker at 127.0.0.1:" in err and "OM_BOOTSTRAP" in err


@pytest.fixture
def taken_port():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def test_the_demo_fails_at_once_on_a_taken_web_port(tmp_path, capsys, monkeypatch, taken_port):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OM_BROKER_PORT", str(free_port()))
    monkeypatch.setenv("OM_CONTROLLER_PORT", str(free_port()))
    started = time.monotonic()
    code, out, err = run(["demo", "--exit", "--port", taken_port], capsys)
    assert time.monotonic() - started < 5
    assert (code, out) == (1, "")
    assert err == f"port {taken_port} is in use: stop what holds it or set OM_WEB_PORT / omstream.web_port / --port\n"
    assert not (tmp_path / ".omstream").exists()  # nothing was started or created


def test_the_demo_fails_at_once_on_a_taken_broker_port(tmp_path, capsys, monkeypatch, taken_port):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OM_BROKER_PORT", str(taken_port))
    monkeypatch.setenv("OM_CONTROLLER_PORT", str(free_port()))
    code, _, err = run(["demo", "--exit", "--port", free_port()], capsys)
    assert code == 1
    assert err == f"port {taken_port} is in use: stop what holds it or set OM_BROKER_PORT / omstream.broker_port\n"


def test_serve_on_a_taken_port_names_it(capsys, monkeypatch, taken_port):
    import omstream.logs

    monkeypatch.setattr(omstream.logs, "setup_logging", lambda level: None)
    code, out, err = run(["serve", "--port", taken_port], capsys)
    assert (code, out) == (1, "")
    assert err == (f"om serve: port {taken_port} is in use: stop what holds it or set "
                   "OM_WEB_PORT / omstream.web_port / --port\n")


async def test_serve_announces_itself_only_once_bound(monkeypatch):
    from omstream.projections import serve
    from omstream.settings import Settings

    class Feed:
        def __init__(self, settings, **options):  # options: the read model's store
            self.projection, self.ready = type("P", (), {"threads": {}, "retrieval": None})(), False

        async def start(self):
            self.ready = True

        async def run(self):
            await asyncio.Event().wait()

        async def stop(self):
            pass

    monkeypatch.setattr(serve, "ProjectionFeed", Feed)
    port = free_port()
    announced = asyncio.get_running_loop().create_future()

    def on_ready(url: str) -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=1):  # already listening
            announced.set_result(url)

    server = asyncio.create_task(serve.serve(Settings(web_port=port), on_ready=on_ready))
    try:
        assert await asyncio.wait_for(announced, 10) == f"http://127.0.0.1:{port}"
    finally:
        server.cancel()
        with pytest.raises(asyncio.CancelledError):
            await server


def test_unknown_thread_reason():
    from omstream.cli.manual import unknown_thread
    from omstream.schemas.config import OmConfig
    from omstream.settings import Settings

    thread_scope = Settings(namespace="n")
    assert unknown_thread(thread_scope, "t9", None) == (
        "unknown thread 't9' in namespace 'n': no message was sent to it "
        "(check the id, and omstream.namespace / OM_NAMESPACE)")
    resource_scope = Settings(om=OmConfig.model_validate({"scope": "resource"}))
    assert unknown_thread(resource_scope, "t9", None).endswith("name its resource with --resource)")


def test_every_error_of_a_command_ends_in_one_place():
    import argparse

    from omstream.cli.common import CommandError, failure
    from omstream.conversations.export import UnknownVersion
    from omstream.infra.broker import BrokerError
    from omstream.models.local import LocalModelMissing
    from omstream.schemas.errors import OmError

    export = argparse.Namespace(command="export", config=None)
    assert failure(export, UnknownVersion("no such version")) == (["om export: no such version"], 2)
    assert failure(export, CommandError("nothing of it", 2)) == (["om export: nothing of it"], 2)
    assert failure(export, OmError("refused")) == (["om export: refused"], 1)
    assert failure(export, RuntimeError("a bug")) is None  # kept as a traceback
    broker = argparse.Namespace(command="broker", action="start", config=None)
    assert failure(broker, BrokerError("no java")) == (["om broker start: no java"], 1)
    model = argparse.Namespace(command="model", action="status", config=None)
    assert failure(model, LocalModelMissing("unknown")) == (["om model status: unknown"], 2)


def test_the_read_side_loads_no_writer():
    import subprocess
    import sys

    code = ("import sys, omstream.projections.serve; "
            "print(sorted(m for m in ('omstream.client', 'omstream.conversations.files', 'aiokafka') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("command", [["worker"], ["serve"]], ids=" ".join)
def test_the_long_running_processes_refuse_buffering_in_resource_scope(tmp_path, capsys, command):
    # Resource scope runs live; what the documentation rules out there is refused at load, by path.
    config = tmp_path / "om.toml"
    config.write_text('[observationalMemory]\nscope = "resource"\n[observationalMemory.observation]\n'
                      'bufferTokens = 0.2\n')
    code, out, err = run(["--config", config, *command], capsys)
    assert code == 1 and out == ""
    assert err.startswith("observation.bufferTokens: asks for async buffering, which is not supported with scope: "
                          "'resource'")


def test_the_long_running_processes_take_resource_scope(tmp_path):
    from omstream.cli.servers import live_settings

    config = tmp_path / "om.toml"
    config.write_text('[observationalMemory]\nscope = "resource"\n')
    for command in ("worker", "serve"):
        args = build_parser().parse_args(["--config", str(config), command])
        assert live_settings(args).om.scope == "resource"
