"""Agent-loop markers on `<ns>.control`: steps and turn ends.

Control records and messages travel on different topics, so Kafka does not order them against
each other.  A step names the newest message the agent had (`afterMessageId`); the fold holds the
step until that message has been folded, which restores the agent's own order.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from .base import SCHEMA_VERSION, WireModel

__all__ = ["StepStarted", "TurnEnded"]


class StepStarted(WireModel):
    type: Literal["step-started"] = "step-started"
    schema_version: int = SCHEMA_VERSION
    thread_id: str = Field(min_length=1)
    resource_id: str | None = None
    step_number: int = Field(ge=0)
    model: str | None = None
    at: datetime
    after_message_id: str | None = None


class TurnEnded(WireModel):
    type: Literal["turn-ended"] = "turn-ended"
    schema_version: int = SCHEMA_VERSION
    thread_id: str = Field(min_length=1)
    resource_id: str | None = None
    at: datetime
    after_message_id: str | None = None
