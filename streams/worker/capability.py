"""Whether a model takes attachments, answered for a fold worker that must not import litellm.

`observeAttachments = "auto"` asks the fold whether the Observer model takes images
(`omstream.models.capabilities.takes_attachments`), and for a hosted model the answer is in
litellm's model table.  A `fold` worker keeps litellm out of its process (seconds of import,
a large heap, a thread contending for the interpreter lock), so it asks a short child process
instead, once per model name: the same table, the same answer, so the fold decides as an
`all` worker would.  Scripted and local models are answered without it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from functools import cache

from omstream.models.capabilities import takes_attachments

__all__ = ["takes_attachments_apart"]

_ASK = ("import json, sys\n"
        "from omstream.models.capabilities import litellm_vision\n"
        "print(json.dumps(litellm_vision(sys.argv[1])))\n")


def takes_attachments_apart(model: str) -> bool | None:
    """As `takes_attachments`, with litellm's table read in a child process."""
    return takes_attachments(model, vision=_asked)


@cache
def _asked(model: str) -> bool | None:
    try:
        done = subprocess.run([sys.executable, "-c", _ASK, model], capture_output=True, text=True,
                              timeout=120, check=True)
        answer = json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None  # as the in-process lookup answers a table it cannot read: unknown
    return answer if isinstance(answer, bool) else None
