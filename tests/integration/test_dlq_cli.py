"""`om dlq` on real dead letters: a record that is not JSON and an invalid message are refused by
the worker; `list` finds them by code and thread, `show` explains them, `resend` refuses the
invalid one as it is and sends the fixed one, which the worker then accepts."""

import asyncio

import orjson
import pytest

from omstream.cli import main
from omstream.client import OmClient
from omstream.topics import Topics
from tests.helpers import message
from tests.integration.support import EventWatcher, read_all

pytestmark = pytest.mark.integration


def om(env, capsys, *argv) -> tuple[int, str, str]:
    status = main(["--config", str(env.config), "dlq", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_list_show_and_resend_a_fixed_record(new_env, tmp_path, capsys):
    env = new_env(100_000)
    env.start_worker()
    topics = Topics(env.settings.namespace)
    invalid = {**message(1, thread="fixme").wire(), "role": "robot"}

    async def refuse():
        async with OmClient(env.settings) as client, EventWatcher(env.settings) as watcher:
            await client.send_message(message(0, thread="fixme"))
            await client.send_raw(topics.log, b"thread:junk", b"\xffnot json at all")
            await client.send_raw(topics.log, b"thread:fixme", orjson.dumps(invalid))
            await client.send_message(message(2, thread="fixme"))
            await watcher.wait_for(lambda evs: sum(e.type == "om-message-accepted" for e in evs) == 2)
        while len(await read_all(env.settings, topics.dlq, idle=0.3)) < 2:
            await asyncio.sleep(0.2)

    asyncio.run(refuse())
    status, out, _ = om(env, capsys, "list")
    lines = out.splitlines()
    assert status == 0 and lines[-1] == "2 dead letters" and len(lines) == 3, out
    listing = out
    status, out, _ = om(env, capsys, "list", "--code", "invalid", "--json")
    [invalid_letter] = [orjson.loads(line) for line in out.splitlines()]
    assert invalid_letter["threadId"] == "fixme" and invalid_letter["source"]["topic"] == topics.log
    status, out, _ = om(env, capsys, "list", "--thread", "junk")
    assert out.splitlines()[-1] == "1 dead letter" and "not-json" in out
    junk_position = out.split()[0]

    status, out, _ = om(env, capsys, "show", invalid_letter["position"])
    assert status == 0 and "code:    invalid" in out and "robot" in out and "does not decode" in out
    assert f"{topics.log} partition {invalid_letter['source']['partition']} offset" in out
    status, out, _ = om(env, capsys, "show", junk_position, "--json")
    assert orjson.loads(out)["record"]["base64"]  # not UTF-8: its bytes
    assert om(env, capsys, "show", "9:999")[0] == 2

    # As it was, it would be refused again: nothing is sent.
    status, out, err = om(env, capsys, "resend", invalid_letter["position"])
    assert status == 2 and out == "" and err.startswith("om dlq: the record would be refused again (invalid)")
    assert err.count("\n") == 1
    fixed = tmp_path / "fixed.json"
    fixed.write_bytes(orjson.dumps({**invalid, "role": "user"}))
    status, out, err = om(env, capsys, "resend", invalid_letter["position"], "--file", str(fixed))
    assert status == 0 and "resent dead letter" in out and "(thread fixme)" in out, err
    resent = out

    async def accepted():
        async with EventWatcher(env.settings) as watcher:
            evs = await watcher.wait_for(lambda evs: any(
                e.type == "om-message-accepted" and e.data.message.id == invalid["id"] for e in evs))
        return evs, await read_all(env.settings, topics.dlq, idle=0.5)

    evs, letters = asyncio.run(accepted())
    fixed_event = next(e for e in evs if e.type == "om-message-accepted" and e.data.message.id == "fixme-m1")
    assert fixed_event.data.message.role == "user" and len(letters) == 2  # accepted, no new dead letter
    print(f"\n{listing}{resent}accepted as {fixed_event.data.message.id}; dead letters still {len(letters)}")
