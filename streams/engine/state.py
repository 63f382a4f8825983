"""The per-memory state record the fold produces and the table stores."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from omstream.schemas.jobs import JobTrigger, ModelResult, Usage

__all__ = ["Attachment", "BufferedChunk", "BufferedReflection", "Cycle", "CycleKind", "Generation", "MemoryState",
           "PendingMessage", "Phase", "Seen", "ThreadMemory"]


class Seen(Mapping[str, str]):
    """The ids of the messages a memory has folded, each with its content hash: immutable.

    It grows with the thread, so it is never copied: `with_id` shares `base` (every id known
    before this batch; in the worker, a view of the stored entries) and copies only `added`,
    the ids folded since.  The worker writes `added` as entries of their own
    (`omstream.pipeline.storage`), so the state record does not grow with the thread.
    """

    __slots__ = ("base", "added")
    #: With a plain dict as base, `added` is merged into it beyond this size (pure runs).
    _MERGE_AT = 256

    def __init__(self, base: Mapping[str, str] | None = None, added: dict[str, str] | None = None) -> None:
        self.base: Mapping[str, str] = base if base is not None else {}
        self.added: dict[str, str] = added or {}

    def get(self, message_id: str, default: Any = None) -> Any:
        found = self.added.get(message_id)
        return found if found is not None else self.base.get(message_id, default)

    def __getitem__(self, message_id: str) -> str:
        found: str | None = self.get(message_id)
        if found is None:
            raise KeyError(message_id)
        return found

    def __iter__(self) -> Iterator[str]:
        yield from self.base
        yield from (k for k in self.added if k not in self.base)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"Seen(base={len(self.base) if isinstance(self.base, dict) else '...'}, added={len(self.added)})"

    def with_id(self, message_id: str, digest: str) -> Seen:
        added = {**self.added, message_id: digest}
        if len(added) > self._MERGE_AT and isinstance(self.base, dict):
            return Seen({**self.base, **added})
        return Seen(self.base, added)


def _as_seen(value: Any) -> Seen:
    # A stored state from before the split carries its ids inline (schema version 1).
    return value if isinstance(value, Seen) else Seen(dict(value or {}))


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Attachment(_Frozen):
    """An image or file of a message, as an observer request needs it.

    Kept with the pending message (`PendingMessage.attachments`), in the order of the message's
    placeholders, whatever the policy: the policy is applied when a request is built, so a
    replay under another `observeAttachments` decides from the same state.  Inline bytes are
    kept as a `data:` URI; they are bounded by the input record size limit (`max_record_bytes`,
    512 KiB by default), and the message's `om-message-accepted` event already carries the same
    bytes, so a pending message is at most about as large as a record the worker already writes.
    """

    kind: Literal["image", "file"]  # an image-like file is an image: counted and sent as one
    url: str  # an http(s) (or other) URL, or a data: URI (bare base64 is made one)
    mime_type: str | None = None  # declared, else read from the data: URI, the bytes or the name
    label: str | None = None  # the placeholder's label (file name, URL basename, mime type)
    filename: str | None = None  # sent with a file, as litellm's `file.filename`
    detail: Literal["low", "high", "auto"] | None = None  # an image's detail hint


class PendingMessage(_Frozen):
    """An unobserved message, with what the observer transcript and the counters need."""

    id: str
    role: str
    created_at: datetime
    text: str
    tokens: int
    title: str | None = None  # the transcript's line title; "Signal" for a temporal-gap marker
    # A message of parts: its transcript lines as (title, body), attachment placeholders still
    # to be numbered (transcript.message_lines); None renders one line, `title`/role and `text`.
    lines: tuple[tuple[str, str], ...] | None = None
    # Its images and files, one per placeholder of `lines` and in their order, for the observer
    # request to forward (observer_attachments.observer_user_content; the policy is applied there).
    attachments: tuple[Attachment, ...] = ()
    # Tool exchanges: the call ids this message opens and answers (safe buffer prefix, §6.9).
    calls: tuple[str, ...] = ()
    answers: tuple[str, ...] = ()
    # Resource scope: the thread the message belongs to (None in thread scope: the memory's).
    thread_id: str | None = None


#: The model calls a cycle makes: blocking (observe, reflect) or in the background.
CycleKind = Literal["observe", "reflect", "buffer", "buffer-reflection"]
#: Where the check a blocking cycle holds resumes when the cycle ends (`check.resume`).
Phase = Literal["before-observe", "observe", "after-observe"]


class Cycle(_Frozen):
    """A model call in flight: what it covers and when (event time) it started.

    A blocking cycle belongs to the check that started it (a step, or a message when no steps
    are reported): `phase` says where that check resumes when the cycle ends, and the check's
    `data-om-status` is emitted only then, after the cycle's own events, as the original does.
    """

    cycle_id: str
    kind: CycleKind
    message_ids: tuple[str, ...]
    tokens: int
    started_at: datetime
    generation: int
    phase: Phase = "observe"
    step_number: int | None = None
    trigger: JobTrigger = "turn-sync"
    level: int = 0  # reflection compression level
    guidance: str | None = None
    # Reflection ladder: every attempt so far as (level, tokens, failed), and its text.
    attempts: tuple[tuple[int, int, bool], ...] = ()
    candidates: tuple[str, ...] = ()
    suggested: tuple[str | None, ...] = ()
    target: int = 0  # tokens a reflection must get under
    line_count: int = 0  # buffered reflection: the leading log lines it rewrites
    model: str | None = None
    # The main answer, kept while the cycle waits for its extractors' structured follow-up.
    answer: ModelResult | None = None
    extract_retried: bool = False  # the follow-up was asked once more (spec §9.3)
    raw: tuple[str, ...] = ()  # reflection ladder: each attempt's answer, for its inline values
    # A resource memory's observation: the threads of each batch (one observer job per batch,
    # job id `<cycle_id>/<n>`) and each batch's answer once in (spec §6.10).
    batches: tuple[tuple[str, ...], ...] = ()
    batch_answers: tuple[ModelResult | None, ...] = ()
    regenerated: tuple[int, ...] = ()  # batches whose looping answer was asked for once more
    # One thread per call (extractors, `resource_extracting`): an answer waiting for its
    # structured follow-up, and each committed batch's follow-up answer.
    batch_mains: tuple[ModelResult | None, ...] = ()
    batch_followups: tuple[ModelResult | None, ...] = ()
    followups_again: tuple[int, ...] = ()  # batches whose follow-up was asked for once more
    # The lifecycle hooks' figures (spec §13): every model call of the cycle so far, summed (its
    # regeneration, ladder rungs, batches and structured follow-ups), and the last call's
    # provider metadata with the calls' costs summed.  A reflection ladder's later rungs are
    # cycles of their own on the log, but one cycle to the hooks: `ladder_of` names the first.
    usage: Usage | None = None
    provider_metadata: dict[str, Any] | None = None
    ladder_of: str | None = None

    @property
    def hook_id(self) -> str:
        """The cycle the lifecycle hooks report: a ladder's first rung, else this one."""
        return self.ladder_of or self.cycle_id


class BufferedChunk(_Frozen):
    """Observations computed in the background, waiting for activation (spec §3.2)."""

    cycle_id: str
    observations: str
    tokens: int  # observation tokens
    message_ids: tuple[str, ...]
    message_tokens: int
    last_observed_at: datetime
    # The observer's continuation hints, which become the memory's on activation (docs: kept
    # through activation; the original drops them from buffered calls).
    current_task: str | None = None
    suggested_response: str | None = None


class BufferedReflection(_Frozen):
    """A reflection of the log's first `line_count` lines, waiting for activation (spec §6.8)."""

    cycle_id: str
    text: str
    tokens: int
    input_tokens: int
    line_count: int
    suggested_response: str | None = None


class ThreadMemory(_Frozen):
    """A thread of a resource memory: its OM metadata (spec §3.3, §6.10)."""

    last_observed_at: datetime | None = None
    current_task: str | None = None
    suggested_response: str | None = None
    title: str | None = None
    title_pinned: bool = False
    metadata: dict[str, Any] = {}  # its extractor values at their key paths (`extracted.<slug>`)


class Generation(_Frozen):
    """A finished generation of the record: what a reflection replaced (history, spec §3.1)."""

    generation: int
    record_id: str
    observation_tokens: int
    ended_at: datetime


class MemoryState(_Frozen):
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    memory_key: str
    thread_id: str
    resource_id: str | None = None
    seq: int = 0
    notices: int = 0  # the seqs taken by notices (held and released inputs): ids count the others
    generation: int = 0
    observations: str = ""
    observation_tokens: int = 0
    cursor: datetime | None = None
    pending: tuple[PendingMessage, ...] = ()
    # Not part of the record: stored as entries of their own (see `Seen`).
    seen: Annotated[Seen, BeforeValidator(_as_seen)] = Field(default_factory=Seen, exclude=True)
    in_flight: Cycle | None = None
    held: tuple[dict[str, Any], ...] = ()  # inputs that arrived while a blocking cycle was in flight
    held_for: str | None = None  # the cycle they wait for (`om-input-held`, `om-input-released`)
    blocked_since: datetime | None = None  # log time the blocking cycle in flight began
    answered: tuple[str, ...] = ()  # the latest cycles whose model answer was applied
    parked: tuple[dict[str, Any], ...] = ()  # always empty since the one input log; kept so stored states load
    current_task: str | None = None
    suggested_response: str | None = None
    steps_reported: bool = False
    clock: datetime | None = None
    cycles_completed: int = 0
    chunks: tuple[BufferedChunk, ...] = ()
    buffering: Cycle | None = None  # background observation in flight
    buffer_boundary: int = 0  # pending tokens when the last buffer was triggered (spec §6.2)
    # The record's `pendingMessageTokens` (spec §3.1): the pending count the last status
    # reported, zeroed by a blocking observation and a reflection, lowered by activation.
    # Activation plans against it, not the live count (spec §6.4 step 5).
    pending_message_tokens: int = 0
    reflection_buffering: Cycle | None = None  # background reflection in flight
    buffered_reflection: BufferedReflection | None = None
    history: tuple[Generation, ...] = ()
    # What activation on idle or on a provider change decides with (spec §6.4 step 3).
    last_activity_at: datetime | None = None
    last_model: str | None = None
    # Per-memory overrides (spec §2): observation.messageTokens, reflection.observationTokens.
    message_tokens_override: int | None = None
    observation_tokens_override: int | None = None
    title: str | None = None
    title_pinned: bool = False
    # The thread's OM metadata: extractor values at their key paths (`extracted.<slug>`, ...).
    metadata: dict[str, Any] = {}
    working_memory: Any = None  # the thread's working-memory document (markdown or JSON)
    requests: tuple[str, ...] = ()  # recent control request ids, for idempotent commands
    # Observation tokens at which a threshold reflection gave up (failed, or could not get below
    # the threshold): it is not retried until the observations change (spec §6.7, §8.3).
    reflection_suppressed_at: int | None = None
    # Input positions already folded into this state (topic -> offset), written by the edge in
    # the same table value, so a redelivered input after a crash is recognised and skipped.
    offsets: dict[str, int] = {}
    # Resource scope (spec §6.10): each thread's metadata, and the thread of the input being
    # folded (or whose check a blocking cycle holds): the one whose window the check measures.
    threads: dict[str, ThreadMemory] = {}
    focus: str | None = None

    @property
    def pending_ids(self) -> tuple[str, ...]:
        return tuple(m.id for m in self.pending)
