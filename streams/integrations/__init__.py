"""omstream inside the agent frameworks people already write: each a thin adapter over
`omstream.client.ThreadMemory` (the agent-loop protocol), behind an optional extra.

- `openai_agents`: `OmSession`, a Session of the OpenAI Agents SDK (`pip install omstream[agents]`),
  and `openai_agents_items`, its pure conversion of Responses-API items to chat messages and back
  (no SDK needed);
- `pydantic_ai`: `OmMemory`, a history processor, a run recorder and the recall tool for
  Pydantic AI (`omstream[pydantic-ai]`); `pydantic_ai_messages` its conversions, Pydantic AI
  messages to chat messages and back;
- `langgraph`: `OmMemory`, a pre-model hook, a message store and the recall tool for LangGraph
  (`omstream[langgraph]`), with `langgraph_messages`, LangChain messages <-> chat messages;
- `mcp`: `om mcp`, an MCP server of a namespace's memories, on the `mcp` SDK (`omstream[mcp]`);
  `mcp_tools` is what its tools and resources do, apart from the SDK (schemas, argument checks,
  the answers through `OmClient`; it needs no extra).

Importing a module here without its framework installed raises an ImportError that names the
extra to install.
"""
