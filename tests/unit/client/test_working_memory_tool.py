"""`omstream.client.working_memory_tool`: the tool exists only for an agent-managed working
memory, its definition follows `workingMemory.schema`, and what the fold would refuse is answered
to the model as `{"error": reason}` before anything is sent (no broker: the client never connects
on these paths)."""

import json

import pytest

from omstream.client import OmClient
from omstream.client.working_memory_tool import WorkingMemoryTool
from omstream.schemas.config import load_om_config
from omstream.settings import Settings


def client(**working_memory) -> OmClient:
    return OmClient(Settings(om=load_om_config({"workingMemory": working_memory})))


def test_without_an_agent_managed_working_memory_there_is_no_tool():
    with pytest.raises(ValueError, match="keeps no working memory"):
        WorkingMemoryTool(client(), "t1")
    with pytest.raises(ValueError, match="keeps no working memory"):
        WorkingMemoryTool(client(enabled=True, agentManaged=False), "t1")


def test_the_definition_takes_markdown_or_the_schemas_object():
    markdown = WorkingMemoryTool(client(enabled=True), "t1")
    assert markdown.name == "updateWorkingMemory"
    assert markdown.definition["function"]["parameters"]["properties"]["memory"]["type"] == "string"
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    structured = WorkingMemoryTool(client(enabled=True, schema=schema), "t1")
    assert structured.definition["function"]["parameters"]["properties"]["memory"]["required"] == ["city"]


async def test_malformed_calls_are_answered_with_the_reason_and_nothing_is_sent():
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    tool = WorkingMemoryTool(client(enabled=True, schema=schema), "t1")
    assert (await tool("not json"))["error"].startswith("the arguments are not a JSON object")
    assert await tool("[1]") == {"error": "the arguments must be a JSON object"}
    assert await tool({"notes": "x"}) == {"error": "the arguments must be a JSON object with `memory`"}
    assert "city" in (await tool({"memory": {"town": "Lyon"}}))["error"]
    other = await tool.answer({"id": "c1", "function": {"name": "recall", "arguments": "{}"}})
    assert other["tool_call_id"] == "c1" and json.loads(other["content"]) == {"error": "unknown tool 'recall'"}
