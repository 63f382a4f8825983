"""examples/agent_loop.py end to end, as a user runs it: its own process, against the session's
broker, a worker and `om serve`, with the scripted models (issue 27, acceptance 6).

The evidence is the example's own output: each turn's context holds every message written so
far (it read its own writes), an observation reaches the context and the model's prompt, and the
feed it followed showed the lifecycle of every message, in order.
"""

import asyncio
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.integration.options import om_options
from tests.integration.support import Server, events

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agent_loop.py"
CONTEXT = re.compile(r"^\[turn (\d+)\] context: (\d+) messages observed, (\d+) raw, (\d+) characters of observations$")
FEED = re.compile(r"^  \[feed (\d+)\] (.*)$")


def test_the_agent_loop_example_runs_against_the_local_services(new_env, tmp_path):
    # The example's own configuration's memory options (examples/agent.toml), on this run's namespace.
    env = new_env(options=om_options(observation={"messageTokens": 150, "bufferTokens": False},
                                     retrieval={"scope": "resource"}))
    env.start_worker()
    server = Server(env.settings, tmp_path / "serve.log")
    try:
        asyncio.run(server.ready())
        run = subprocess.run([sys.executable, str(EXAMPLE), "--config", str(env.config), "--url", server.url,
                              "--thread", "loop", "--wait", "60"],
                             capture_output=True, text=True, timeout=240)
    finally:
        server.stop()
    out = run.stdout
    print(out)
    assert run.returncode == 0, (run.stderr[-3000:], env.logs())

    lines = out.splitlines()
    contexts = [tuple(map(int, m.groups())) for m in map(CONTEXT.match, lines) if m]
    turns = len(contexts)
    assert turns == 5 and [c[0] for c in contexts] == [1, 2, 3, 4, 5], contexts
    # Turn k reads k user messages and k-1 replies: everything it wrote, observed or raw.
    assert [observed + raw for _, observed, raw, _ in contexts] == [2 * k - 1 for k in range(1, turns + 1)]
    observed_at = [observed for _, observed, _, _ in contexts]
    assert observed_at[0] == 0 and observed_at[-1] > 0 and observed_at == sorted(observed_at), observed_at
    # The observation is about the conversation (the scripted Observer keeps each message's words).
    shown = "\n".join(line for line in lines if line.startswith("    | "))
    assert "Avignon" in shown and "panniers" in shown, shown
    # ... and it reached the model: the scripted assistant counts the bullets of its system prompt.
    remembered = [int(n) for n in re.findall(r"^\[turn \d+\] scripted/assistant: .*\(I remember (\d+) observations\.\)$",
                                             out, re.MULTILINE)]
    assert len(remembered) == turns and remembered[0] == 0 and remembered[-1] > 0, remembered

    feed = [(int(m[1]), m[2]) for m in map(FEED.match, lines) if m]
    seqs = [seq for seq, _ in feed]
    assert seqs == list(range(1, len(seqs) + 1)), seqs  # every event of the memory, once, in order
    accepted = [text for _, text in feed if text.startswith("accepted ")]
    assert len(accepted) == 2 * turns and f"done: {turns} turns, {2 * turns} messages seen on the feed" in out
    assert any(text.startswith("data-om-observation-start") for _, text in feed)
    assert any(text.startswith("observed ") for _, text in feed)
    assert sum(text.startswith("status:") for _, text in feed) >= turns
    # The recall tool, as the model would call it, reads the thread's first messages back.
    recalled = [line for line in lines if line.startswith("[recall] ")]
    assert len(recalled) == 1 and re.match(
        r"^\[recall\] 2 messages from the thread's start, the first \*\*user \(\d{4}-\d\d-\d\d [\d:]{8}Z\)\*\* "
        r"\[[0-9a-f]{8}-1-user\]:$", recalled[0]), recalled
    # With retrieval on, the observations are groups with the range of the messages they came from.
    assert re.search(r'^    \| <observation-group id="[0-9a-f]{16}" range="[0-9a-f]{8}-1-user:[^"]+">$', out, re.M), out
    print(f"turns {turns}, observed per turn {observed_at}, feed events {len(feed)}, "
          f"observations remembered by the model {remembered}")


README = Path(__file__).resolve().parents[2] / "README.md"


def readme_agent_loop() -> str:
    """The README's agent loop: its first Python block."""
    block = re.search(r"^```python\n(.*?)^```$", README.read_text(encoding="utf-8"), re.S | re.M)
    assert block, "the README has no Python block"
    return block[1]


def test_the_readme_agent_loop_runs_as_written(new_env, tmp_path):
    # The README's code as a user pastes it, on this run's namespace: only the configuration path
    # differs, and `om serve`'s port comes from the environment as a user's deployment may set it.
    env = new_env(options=om_options(observation={"messageTokens": 60, "bufferTokens": False}))
    env.start_worker()
    server = Server(env.settings, tmp_path / "serve.log")
    code = readme_agent_loop()
    assert code.count('"examples/agent.toml"') == 1, code
    try:
        asyncio.run(server.ready())
        run = subprocess.run([sys.executable, "-c", code.replace('"examples/agent.toml"', repr(str(env.config)))],
                             capture_output=True, text=True, timeout=240,
                             env={**os.environ, "OM_WEB_PORT": str(server.settings.web_port)})
        assert run.returncode == 0, (run.stderr[-3000:], env.logs())
        seen = asyncio.run(events(env.settings))
    finally:
        server.stop()
    accepted = Counter(e.data.message.id for e in seen if e.type == "om-message-accepted")
    roles = [e.data.message.role for e in seen if e.type == "om-message-accepted"]
    # Two turns: each message stored once, in the order the loop added them, and the second
    # prompt crossed the 60-token threshold (the window it read came after an observation).
    assert sorted(accepted.values()) == [1, 1, 1, 1] and roles == ["user", "assistant"] * 2, accepted
    assert any(e.type == "data-om-observation-end" for e in seen), sorted({e.type for e in seen})
    print(f"README loop: {len(accepted)} messages once each, events {len(seen)}")
