"""The `recall` operation (spec §12): the agent reads the messages behind its observations.

    recall(source, caller, params, search=None) -> dict

`source.py` reads the read side's messages and threads, `messages.py` pages them, `parts.py`
and `render.py` show them within the budgets, `threads.py` lists threads, `search_port.py` is
where semantic search plugs in, `params.py` checks the parameters, `tool.py` decides who may see
what and which mode answers, `instructions.py` is the guidance the agent's context carries.
"""

from .instructions import recall_instructions
from .params import RecallError, RecallParams, parse_params
from .search_port import SEARCH_NOT_CONFIGURED, SearchPort
from .source import RecallSource
from .tool import Caller, recall

__all__ = ["SEARCH_NOT_CONFIGURED", "Caller", "RecallError", "RecallParams", "RecallSource", "SearchPort",
           "parse_params", "recall", "recall_instructions"]
