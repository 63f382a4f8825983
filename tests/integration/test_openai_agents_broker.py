"""`OmSession` under the OpenAI Agents SDK's own `Runner`, against the session's broker, a worker
and `om serve` (issue 42, the Agents SDK integration).

The model is the SDK's own test model (`agents.testing.ScriptedModel`): it answers from a script
(one turn calls a function tool) and records the `input` of every call, which is the evidence:
the run after the tool's turn gives the model the call and its result back (unobserved yet), and
once the scripted Observer observed, the model's input holds the observations and none of the
observed messages.  The thread's events show every stored item once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re

import pytest

pytest.importorskip("agents")

from agents import Agent, RunConfig, Runner, function_tool  # noqa: E402
from agents.testing import ScriptedModel, assistant_message, function_call  # noqa: E402

from omstream.client import OmClient  # noqa: E402
from omstream.integrations.openai_agents import OmSession  # noqa: E402
from tests.integration.options import om_options  # noqa: E402
from tests.integration.support import EventWatcher, events, served  # noqa: E402

pytestmark = pytest.mark.integration

THREAD = "agents-t"
PROMPTS = [
    "Hi! I'm planning a cycling trip from Lyon to Avignon in May, about 250 km over four days.",
    "What is the weather like in Lyon right now? I want to pack the right clothes.",
    "I ride a steel touring bike with panniers; my knees dislike long climbs above 8 percent.",
    "My partner Sam joins for the last two days, arriving by train in Valence on the Thursday.",
    "We'd like to camp two nights and stay in a guesthouse the other nights, budget 60 euros.",
    "Should we carry a stove, or are there enough cafes along the ViaRhona cycle path?",
    "What spare parts would you pack for a steel touring bike on a four day trip?",
    "Remind me: which day does Sam join, and where should we meet?",
]
TOOL_TURN = 1  # the turn (0-based) whose model calls the weather tool
WINDOW = re.compile(r"^\[turn (\d+)\] window: (\d+) messages observed, (\d+) raw, (\d+) characters of observations$")
FORECAST = "Sunny in Lyon, 21 degrees, light wind from the north"


@function_tool
def weather(city: str) -> str:
    """Today's weather in a city."""
    return FORECAST if city == "Lyon" else "unknown"


def text_of(item: dict) -> str:
    """An input item's text (its content, or a tool result's output)."""
    content = item.get("content", item.get("output"))
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content)
    return str(content or "")


def stored_text(content) -> str:
    if isinstance(content, str):
        return content
    return " ".join(getattr(p, "text", None) or str(getattr(p, "result", "") or "") for p in content)


@pytest.fixture(scope="module")
def services(broker, tmp_path_factory):
    """One namespace, its worker and `om serve` for this file's tests (each on its own thread):
    the scripted Observer, blocking at a small threshold (about examples/agent.toml's)."""
    options = om_options(observation={"messageTokens": 140, "bufferTokens": False})
    with served(broker, tmp_path_factory.mktemp("agents"), options) as both:
        yield both


def accepted_of(evs: list, thread: str) -> list:
    return [e for e in evs if e.type == "om-message-accepted" and e.data.message.thread_id == thread]


def test_runner_with_om_session_remembers_through_the_window(services):
    env, server = services
    model = ScriptedModel()
    config = RunConfig(tracing_disabled=True)
    report: dict = {}

    async def scenario() -> None:
        async with OmClient(env.settings) as om:
            session = OmSession(om, THREAD, resource_id="u1", base_url=server.url, wait=60)
            agent = Agent(name="planner", instructions="You help plan cycling trips.", model=model,
                          tools=[weather, session.recall_tool()])
            for turn, prompt in enumerate(PROMPTS):
                calls_before = len(model.calls)
                if turn == TOOL_TURN:
                    model.enqueue([function_call("weather", {"city": "Lyon"}, call_id="call_weather",
                                                 item_id="fc_weather")])
                model.enqueue([assistant_message(f"Reply {turn}: noted, happy cycling.", item_id=f"msg_{turn}")])
                # The tool's turn also steps inside its tool loop: a step and the window before
                # each model call (`model_input_filter`).
                run_config = (RunConfig(tracing_disabled=True, call_model_input_filter=session.model_input_filter)
                              if turn == TOOL_TURN else config)
                result = await Runner.run(agent, prompt, session=session, run_config=run_config)
                assert result.final_output == f"Reply {turn}: noted, happy cycling."
                first = list(model.calls[calls_before].input)
                window = session.last_window
                assert window is not None
                if turn == TOOL_TURN:
                    report["tool_loop"] = [list(call.input) for call in model.calls[calls_before:]]
                if turn == TOOL_TURN + 1:
                    # The tool's call and its result, stored by the previous run, come back.
                    report["after_tool"] = first
                if window["observations"]:
                    report.update(turn=turn, window=window, input=first)
                    break
            report["turns"] = turn + 1
            # One more turn: the model reads the observed start of the thread back with `recall`.
            calls_before = len(model.calls)
            model.enqueue([function_call("recall", {"anchor": "start", "limit": 2}, call_id="call_recall",
                                         item_id="fc_recall")])
            model.enqueue([assistant_message("You started with Avignon.", item_id="msg_recall")])
            await Runner.run(agent, "How did our conversation start?", session=session, run_config=config)
            report["recall"] = list(model.calls[calls_before + 1].input)
            async with EventWatcher(env.settings) as watcher:
                # user + reply per turn, the weather call and its result, the recall turn's four
                expected = 2 * report["turns"] + 2 + 4
                await watcher.wait_for(lambda evs: len(accepted_of(evs, THREAD)) >= expected)

    asyncio.run(scenario())

    # --- the tool round trip, while unobserved
    after_tool = report["after_tool"]
    calls = [i for i in after_tool if i.get("type") == "function_call"]
    outputs = [i for i in after_tool if i.get("type") == "function_call_output"]
    assert [(c["call_id"], c["name"], json.loads(c["arguments"])) for c in calls] == [
        ("call_weather", "weather", {"city": "Lyon"})], after_tool
    assert [(o["call_id"], o["output"]) for o in outputs] == [("call_weather", FORECAST)], after_tool
    assert after_tool.index(calls[0]) < after_tool.index(outputs[0])

    # --- inside the tool loop, with the filter: each model call's input is the window after a
    # step (items without the SDK's ids), the second one holding the call and its result
    first_call, second_call = report["tool_loop"]
    assert not any("id" in item for item in first_call + second_call)
    assert text_of(first_call[-1]) == PROMPTS[TOOL_TURN] and first_call[-1]["role"] == "user"
    assert [i.get("type") for i in second_call[-2:]] == ["function_call", "function_call_output"], second_call
    assert second_call[-1]["output"] == FORECAST

    # --- the stored thread: every message once, the tool call and its result among them
    accepted = accepted_of(asyncio.run(events(env.settings)), THREAD)
    ids = [e.data.message.id for e in accepted]
    assert len(ids) == len(set(ids)) == 2 * report["turns"] + 2 + 4, ids
    assert {"fc_weather", "call_weather:output", "msg_0", f"msg_{report['turns'] - 1}", "fc_recall",
            "call_recall:output", "msg_recall"} <= set(ids), ids
    by_id = {e.data.message.id: e.data.message for e in accepted}
    call_part = by_id["fc_weather"].content[0]
    assert (call_part.type, call_part.tool_call_id, call_part.tool_name, call_part.args) == (
        "tool-call", "call_weather", "weather", {"city": "Lyon"})
    result_part = by_id["call_weather:output"].content[0]
    assert (result_part.type, result_part.tool_call_id, result_part.tool_name) == (
        "tool-result", "call_weather", "weather")
    assert FORECAST in str(result_part.result)

    # --- after the observation: the observations in, the observed messages out
    window, first = report["window"], report["input"]
    assert report["turn"] > TOOL_TURN + 1, report["turn"]  # the round trip above was before it
    system = "\n".join(text_of(i) for i in first if i.get("role") == "system")
    observed = window["observedMessageIds"]
    # The window's system messages (the observations, rendered for the model) are the model's.
    window_system = [text_of(m) for m in window["chat"] if m["role"] == "system"]
    assert observed and window_system and all(text in system for text in window_system), (window_system, system)
    # The scripted Observer keeps the messages' words: the first turn's reaches the model so.
    assert "Avignon" in window["observations"] and "Avignon" in system, (window["observations"], system)
    rest = [text_of(i) for i in first if i.get("role") != "system"]
    for message_id in observed:
        text = stored_text(by_id[message_id].content).strip()  # a tool call's message has none
        assert not (text and any(text in said for said in rest)), (message_id, text, rest)
    assert {"msg_0", "fc_weather", "call_weather:output"} <= set(observed), observed
    assert not any(i.get("call_id") == "call_weather" for i in first), first
    # --- the recall tool (answered by om serve) gave the model the observed first message back
    recalled = [i for i in report["recall"] if i.get("type") == "function_call_output"
                and i["call_id"] == "call_recall"]
    assert len(recalled) == 1 and PROMPTS[0][:40] in recalled[0]["output"], report["recall"]
    print(f"turns {report['turns']}, observation at turn {report['turn'] + 1}, {len(observed)} messages "
          f"observed, model input after it: {len(first)} items, {len(ids)} messages stored")



def test_the_agents_example_runs_offline_against_the_local_services(services, capsys):
    # The example's own code, in this process (its imports are loaded already), on a thread of
    # its own.
    from omstream.examples.openai_agents_session import PROMPTS as EXAMPLE_PROMPTS
    from omstream.examples.openai_agents_session import converse

    env, server = services
    args = argparse.Namespace(config=str(env.config), model="scripted", thread="example", resource="user-1",
                              url=server.url, wait=60.0)
    asyncio.run(converse(args, EXAMPLE_PROMPTS[:3]))  # the observation comes on the third
    out = capsys.readouterr().out
    print(out)
    windows = [tuple(map(int, m.groups())) for m in map(WINDOW.match, out.splitlines()) if m]
    assert [w[0] for w in windows] == [1, 2, 3], windows
    # Turn k's last model call read every message stored so far (the filter's step after the
    # user's message): k user messages and k-1 replies, observed or raw.
    assert [observed + raw for _, observed, raw, _ in windows] == [1, 3, 5], windows
    assert windows[0][1] == 0 and windows[-1][1] > 0, windows  # an observation happened
    remembered = [int(n) for n in re.findall(r"^\[turn \d+\] scripted/assistant: .*\(I remember (\d+) observations\.\)$",
                                             out, re.MULTILINE)]
    assert len(remembered) == 3 and remembered[0] == 0 and remembered[-1] > 0, remembered  # ... and reached the model
    assert "done: 3 turns in thread 'example'" in out
