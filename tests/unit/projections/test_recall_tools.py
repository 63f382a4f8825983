"""`omstream.client.tools`: the recall tool's OpenAI-style definition and its handler, answered by the
read side's route (`build_web_app` over a projection of folded events, no broker)."""

import json

from aiohttp.test_utils import TestServer

from omstream.client import OmClient
from omstream.client.tools import RecallTool, recall_tool_definition
from omstream.engine.rules.resolution import ResolvedRetrieval
from omstream.projections.feed import ProjectionFeed
from omstream.projections.http.web import build_web_app
from omstream.settings import Settings
from tests.unit.projections.recall_helpers import msg, project


def test_the_definition_is_an_openai_function_shaped_by_scope_and_search():
    resource = recall_tool_definition("resource")
    assert resource["type"] == "function" and resource["function"]["name"] == "recall"
    params = resource["function"]["parameters"]
    assert params["type"] == "object" and params["additionalProperties"] is False
    assert {"threadId", "before", "after", "cursor", "partIndex", "charOffset"} <= set(params["properties"])
    assert params["properties"]["mode"]["enum"] == ["messages", "threads"] and "query" not in params["properties"]
    thread = recall_tool_definition("thread", search=True)["function"]["parameters"]["properties"]
    assert "threadId" not in thread and "before" not in thread and thread["mode"]["enum"][-1] == "search"
    assert thread["query"]["type"] == "string"
    json.dumps(resource)  # plain JSON, as litellm sends it


async def test_the_handler_answers_tool_calls_through_the_route():
    projection, _ = project([msg("t1", n, f"line {n}") for n in range(4)] + [msg("t9", 0, "other", resource="u9")])
    projection.retrieval = ResolvedRetrieval(vector=False, scope="resource", instructions=None)
    feed = ProjectionFeed(Settings(), projection=projection)
    async with TestServer(build_web_app(feed)) as server:
        base = str(server.make_url("")).rstrip("/")
        tool = RecallTool(OmClient(Settings()), "t1", base_url=base, instructions="Be exact.")
        assert tool.instructions.endswith("### Additional recall guidance\nBe exact.")
        reply = await tool.answer({"id": "call_1", "type": "function",
                                   "function": {"name": "recall", "arguments": '{"cursor": "t1-m000", "limit": 2}'}})
        assert reply["role"] == "tool" and reply["tool_call_id"] == "call_1"
        answer = json.loads(reply["content"])
        assert answer["count"] == 2 and "[t1-m001]" in answer["messages"] and "[t1-m002]" in answer["messages"]
        refused = json.loads((await tool.answer({"id": "c2", "function": {"name": "recall",
                                                                         "arguments": '{"threadId": "t9"}'}}))["content"])
        assert refused == {"error": "Thread does not belong to the active resource"}
        assert (await tool('{"page": 80}'))["error"].startswith("page")
        assert (await tool("not json"))["error"].startswith("the arguments are not a JSON object")
        other = json.loads((await tool.answer({"id": "c3", "function": {"name": "weather", "arguments": "{}"}}))["content"])
        assert other == {"error": "unknown tool 'weather'"}
        search = await tool({"mode": "search", "query": "x"})
        assert search["count"] == 0 and search["results"].startswith("Search is not configured")
        missing = RecallTool(OmClient(Settings()), "nobody", base_url=base)
        assert (await missing({}))["error"] == "thread nobody has no messages yet"
