"""`om observe` / `om reflect` only for a thread the log knows (no worker needed: the log decides)."""

import asyncio
from datetime import UTC, datetime

import orjson
import pytest

from omstream.cli import main
from omstream.client import OmClient
from omstream.client.om_client import known_thread
from omstream.schemas.control import ThreadDeleted
from tests.helpers import message
from tests.integration.support import read_all

pytestmark = pytest.mark.integration


def om(env, *argv) -> int:
    return main(["--config", str(env.config), *argv])


def test_commands_for_an_unknown_thread_say_so(new_env, capsys):
    env = new_env()
    ns = env.settings.namespace

    async def send(*records):
        async with OmClient(env.settings) as client:
            for record in records:
                if isinstance(record, ThreadDeleted):
                    await client.send_control(record)
                else:
                    await client.send_message(record)

    asyncio.run(send(message(0, thread="alpha"), message(1, thread="beta")))
    for command in ("observe", "reflect"):
        assert om(env, command, "alhpa") == 1
        out, err = capsys.readouterr()
        assert out == "" and err == (f"om {command}: unknown thread 'alhpa' in namespace '{ns}': no message "
                                     "was sent to it (check the id, and omstream.namespace / OM_NAMESPACE)\n")
    assert om(env, "observe", "alpha") == 0
    assert capsys.readouterr().out.startswith("observe requested for thread alpha")
    assert main(["reflect", "beta", "--config", str(env.config), "--prompt", "short"]) == 0
    capsys.readouterr()
    log = asyncio.run(read_all(env.settings, env.settings.namespace + ".log", idle=0.5))
    assert sorted(orjson.loads(r.value)["type"] for r in log) == [
        "message", "message", "observe-requested", "reflect-requested"]  # refused commands: none

    # a deleted thread is unknown again, until an agent writes to it anew
    asyncio.run(send(ThreadDeleted(thread_id="alpha", at=datetime.now(UTC))))
    assert om(env, "observe", "alpha") == 1 and "unknown thread 'alpha'" in capsys.readouterr().err
    assert asyncio.run(known_thread(env.settings, "beta"))
    asyncio.run(send(message(2, thread="alpha")))
    assert asyncio.run(known_thread(env.settings, "alpha"))


def test_a_namespace_without_topics_knows_no_thread(new_env, capsys, monkeypatch):
    env = new_env()
    monkeypatch.setenv("OM_NAMESPACE", "never-created")
    assert om(env, "observe", "alpha") == 1
    assert "unknown thread 'alpha' in namespace 'never-created'" in capsys.readouterr().err


def test_topics_of_another_partition_count_are_one_line_not_a_traceback(new_env, capsys):
    env = new_env()  # its topics exist with 2 partitions
    other = env.root / "other.toml"
    other.write_text(env.config.read_text().replace("partitions = 2", "partitions = 3"))
    code = main(["topics", "create", "--config", str(other)])
    out, err = capsys.readouterr()
    assert code == 1, (out, err, other.read_text())
    assert out == "" and len(err.splitlines()) == 1
    assert err.startswith("om topics: topic partition counts do not match this configuration")
    assert "has 2 partitions, expected 3" in err


def test_om_tail_prints_a_re_sent_event_once(new_env):
    from io import StringIO

    from omstream.cli.tail import tail
    from omstream.schemas.codec import encode
    from tests.helpers import engine, fold_inputs

    env = new_env()
    _, events, _, _ = fold_inputs([message(0, thread="t1"), message(1, thread="t1")], engine(100_000))
    first, second = events[0], events[-1]
    assert first.seq < second.seq

    async def scenario() -> str:
        async with OmClient(env.settings) as client:
            for event in (first, first, second):  # the copy a crashed worker re-sends
                await client.send_raw(f"{env.settings.namespace}.events", b"thread:t1", encode(event))
        out = StringIO()
        await tail(env.settings, thread=None, from_beginning=True, as_json=True, count=2, out=out)
        lifecycle = StringIO()  # without the accepted messages, only the status is left
        await tail(env.settings, thread=None, from_beginning=True, as_json=True, count=1,
                   messages=False, out=lifecycle)
        assert [orjson.loads(line)["type"] for line in lifecycle.getvalue().splitlines()] == [second.type]
        return out.getvalue()

    printed = [orjson.loads(line)["seq"] for line in asyncio.run(scenario()).splitlines()]
    assert printed == [first.seq, second.seq]
