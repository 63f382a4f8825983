"""The agent writes the working-memory document (`working-memory-set`, its tool's call).

The memory keeps one document (`MemoryState.working_memory`: a thread's in thread scope, the
resource's in resource scope), which the Observer may rewrite too (`manageWorkingMemory`).  The
agent's write replaces it whole, as the original's `updateWorkingMemory` tool does, and is told by
`om-working-memory-updated`; a write the configuration does not allow, or whose document does
not fit, is refused with the reason (the record goes to the dead letters; the memory is unchanged).
"""

from __future__ import annotations

from omstream.schemas.control import WorkingMemorySet
from omstream.schemas.events import WorkingMemoryUpdated, WorkingMemoryUpdatedData

from ..rules.extraction import working_memory_problem
from ..step import Rejected, Step

__all__ = ["set_working_memory"]


def set_working_memory(step: Step, event: WorkingMemorySet) -> None:
    problem = _refusal(step, event)
    if problem is not None:
        step.rejected.append(Rejected(f"working-memory-set for {step.state.memory_key}: {problem}"))
        return
    step.update(working_memory=event.working_memory)
    step.emit(WorkingMemoryUpdated, WorkingMemoryUpdatedData(
        working_memory=event.working_memory, request_id=event.request_id), step.now(event.at))


def _refusal(step: Step, event: WorkingMemorySet) -> str | None:
    resolved = step.config.resolved.working_memory
    if not resolved.enabled:
        return "this memory keeps no working memory (workingMemory.enabled is false)"
    if not resolved.agent_managed:
        return "the Observer keeps this memory's working memory (workingMemory.agentManaged is false)"
    return working_memory_problem(step.config.om.working_memory, event.working_memory)
