"""omstream inside the agent frameworks people already write: each a thin adapter over
`omstream.client.ThreadMemory` (the agent-loop protocol), behind an optional extra.

- `openai_agents`: `OmSession`, a Session of the OpenAI Agents SDK (`pip install omstream[agents]`);
- `pydantic_ai`: a history processor and a run recorder for Pydantic AI (`omstream[pydantic-ai]`);
- `langgraph`: a pre-model hook and a message store for LangGraph (`omstream[langgraph]`);
- `mcp`: `om mcp`, an MCP server of a namespace's memories (`omstream[mcp]`).

Importing a module here without its framework installed raises an ImportError that names the
extra to install.
"""
