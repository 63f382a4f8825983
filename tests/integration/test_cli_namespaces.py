"""`om tail`, `om dlq` and `om export` find the namespace to read, and never wait on a topic that
does not exist: a namespace without it is one line naming the namespace, the topic and the
namespaces the broker has (exit 1).  While an `om demo` runs (its record in the user's state
directory), a reader that names no namespace reads the demo's and says so on stderr.

The commands run as processes with a deadline: one that waits on a missing topic fails the test
by its deadline instead of hanging the suite."""

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time

import pytest

from omstream.cli.namespaces import namespaces_on
from omstream.client import OmClient
from omstream.schemas.codec import encode
from tests.helpers import engine, fold_inputs, message

pytestmark = pytest.mark.integration

DEADLINE = 90  # seconds: a command that waits on a topic forever ends here, and fails


def om(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("OM_")}
    return subprocess.run([sys.executable, "-m", "omstream.cli", *argv], capture_output=True, text=True,
                          env={**base, **env}, timeout=DEADLINE)


@pytest.fixture
def state_home(tmp_path) -> dict[str, str]:
    """A state directory of the test's own: no real demo's record is read, or written."""
    home = tmp_path / "state"
    home.mkdir()
    return {"XDG_STATE_HOME": str(home)}


@pytest.mark.parametrize("command", [["tail"], ["dlq", "list"], ["export", "--thread", "t1"]], ids=" ".join)
def test_a_namespace_without_the_topic_is_refused_at_once_naming_the_ones_there(new_env, state_home, command):
    env = new_env()  # a namespace with topics: the broker lists it
    done = om(*command, "--namespace", "never-made", env={"OM_BOOTSTRAP": env.settings.bootstrap, **state_home})
    assert done.returncode == 1 and done.stdout == "", done
    [line] = done.stderr.splitlines()
    topic = {"tail": "never-made.events", "dlq": "never-made.dlq", "export": "never-made.log"}[command[0]]
    assert line.startswith(f"om {command[0]}: no topic {topic} in namespace 'never-made' on {env.settings.bootstrap}; "
                           "namespaces there: "), line
    assert line.endswith("; choose one with --namespace NS or OM_NAMESPACE"), line
    # The session's broker holds the namespaces of every test so far: the line names the first
    # five, newest first, and counts the rest (this test's is among them, named or counted).
    known = asyncio.run(namespaces_on(env.settings.bootstrap))
    assert env.settings.namespace in known
    listed = line.split("namespaces there: ", 1)[1].removesuffix("; choose one with --namespace NS or OM_NAMESPACE")
    more = f" and {len(known) - 5} more" if len(known) > 5 else ""
    assert listed == ", ".join(known[:5]) + more, (listed, known)


def test_the_running_demos_namespace_is_read_when_none_is_named(new_env, state_home):
    env = new_env()
    ns, bootstrap = env.settings.namespace, env.settings.bootstrap
    _, events, _, _ = fold_inputs([message(0, thread="t1"), message(1, thread="t1")], engine(100_000))

    async def send() -> None:
        async with OmClient(env.settings) as client:
            for event in events:
                await client.send_raw(f"{ns}.events", b"thread:t1", encode(event))

    asyncio.run(send())
    record = os.path.join(state_home["XDG_STATE_HOME"], "omstream", "demo.json")
    os.makedirs(os.path.dirname(record))
    with open(record, "w") as f:  # this test's process stands for the running demo
        json.dump({"namespace": ns, "bootstrap": bootstrap, "pid": os.getpid(), "web": ""}, f)
    reader = {"OM_BOOTSTRAP": bootstrap, **state_home}

    done = om("tail", "--from-beginning", "--count", str(len(events)), env=reader)
    assert done.returncode == 0, done
    assert done.stderr.splitlines()[0] == (f"om tail: reading namespace {ns} of the running om demo (pid {os.getpid()}); "
                                           "--namespace NS or OM_NAMESPACE for another")
    assert len(done.stdout.splitlines()) == len(events) and "message t1-m0" in done.stdout

    # Without --from-beginning it says that it waits for new events, and shows what comes.
    live = subprocess.Popen([sys.executable, "-m", "omstream.cli", "tail", "--count", "1"], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**{k: v for k, v in os.environ.items() if not k.startswith("OM_")}, **reader})
    try:
        lines = [live.stderr.readline() for _ in range(2)]  # the namespace, then what it waits for
        assert lines[1] == f"om tail: following {ns}.events from now on (--from-beginning for the events so far); " \
                           "Ctrl-C stops\n", lines
        # The events again, until the reader prints one: it reads from the end it found when
        # it started, which nothing outside it shows, so records sent before that are not its.
        deadline = time.monotonic() + DEADLINE
        while live.poll() is None and time.monotonic() < deadline:
            asyncio.run(send())
            with contextlib.suppress(subprocess.TimeoutExpired):
                live.wait(timeout=2)
        assert live.returncode == 0 and "t1" in live.stdout.read()
    finally:
        live.kill()

    # A namespace named anywhere wins over the demo's: here, a missing one, which names the demo.
    named = om("tail", env={**reader, "OM_NAMESPACE": "other"})
    assert named.returncode == 1
    assert named.stderr == (f"om tail: no topic other.events in namespace 'other' on {bootstrap}; "
                            f"the running om demo's is {ns}: om tail --namespace {ns}\n")

    # A demo that is gone (its process ended without removing its record) is not read.
    with open(record, "w") as f:
        json.dump({"namespace": ns, "bootstrap": bootstrap, "pid": 2**22 + 12345, "web": ""}, f)
    gone = om("tail", env=reader)
    assert gone.returncode == 1 and gone.stderr.startswith("om tail: no topic om.events in namespace 'om'")
