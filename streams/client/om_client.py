"""The producer client: how an agent runtime writes its conversation to omstream.

    async with OmClient(load_settings()) as om:
        await om.send_message(Message(id="m1", thread_id="t1", role="user",
                                      content="hello", created_at=now))
        step = await om.step_started("t1", step_number=0, after_message_id="m1")
        window = await om.context("t1", after=step)   # read your own writes

Every record is keyed by its memory key, so all inputs of one memory land on one partition.
Token counts are taken here, once, with the configured counter, and travel with the message.

Every send returns the log position(s) it wrote (`LogPosition`, partition and offset, of
`omstream.schemas.positions`).  Passed as `after` to `context` (or
`GET /threads/{id}/context?after=<partition>:<offset>`), it makes the read wait until the fold's
output for that record is in the projection.  That holds for the records whose fold always emits
an event: an accepted message (`om-message-accepted`) and a step with memory enabled
(`data-om-status`), also when a blocking cycle held them (their events come when the cycle ends,
which is what the reader should wait for).  A turn end, a command that changes nothing or a
duplicate message may emit nothing: `after` with their position is met only by a later event of
the partition, otherwise the read times out and says it is stale.

With a namespace key configured (`sealer_of`), the client seals the content of what it sends
before producing it (random nonces: `omstream.crypto.sealing`): a message under its owner's data
key (`content_owner`: in resource scope its thread's), a reflection's prompt and a thread's title
under the memory's.  Its `Sealer` follows `<ns>.keys` while the client is open; without a key it
is `PLAIN` and the client starts nothing more.  `send_raw` writes bytes as given.
"""

from __future__ import annotations

import copy
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import orjson

from omstream.schemas.codec import decode_input, encode
from omstream.schemas.control import (
    ControlRecord,
    ObserveRequested,
    ReflectRequested,
    ResourceDeleted,
    StepStarted,
    ThreadDeleted,
    ThreadPatched,
    TurnEnded,
    WorkingMemorySet,
)
from omstream.schemas.errors import OmError
from omstream.schemas.keys import UnroutedRecord, memory_key, unrouted
from omstream.schemas.messages import Message
from omstream.schemas.positions import LogPosition

from .. import kafka
from ..conversations.files import ConversationRecord, turns
from ..crypto import Sealer, content_owner, sealer_of
from ..crypto.fields import content_paths
from ..crypto.opening import Opener
from ..crypto.sealing import is_marked
from ..settings import Settings
from ..topics import Topics, memory_partition, partitions_of, read_until_end
from .feed_reader import FeedEvent, follow_feed
from .intake import IntakeBarrier
from .outgoing import RefusedRecord, check_outgoing

if TYPE_CHECKING:
    from aiokafka import AIOKafkaProducer

__all__ = ["OmClient", "RefusedRecord", "ServerRefused", "known_thread"]


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.title() for word in rest)


def _position(metadata: Any) -> LogPosition:
    return LogPosition(metadata.partition, metadata.offset)


def _has_content(value: bytes) -> bool:
    """Whether a record's JSON has a content field to seal (so no key is made for a step)."""
    data = orjson.loads(value)
    return isinstance(data, dict) and any(data.get(path) is not None for path in content_paths(data))


class ServerRefused(OmError, RuntimeError):
    """`om serve` refused a read: its status, its error code (`unauthorized`, `bad-parameter`,
    ...: the OpenAPI document's `Error`) and its one-sentence detail."""

    def __init__(self, status: int, code: str, detail: str, what: str) -> None:
        self.status, self.code, self.detail = status, code, detail
        super().__init__(f"om serve refused {what}: {status} {code}: {detail}")


async def _refusal(response: Any, what: str) -> ServerRefused:
    """The error of an answer that is no success, from its JSON error body when it has one."""
    try:
        body = orjson.loads(await response.read())
        code, detail = str(body["error"]), " ".join(str(body["detail"]).split())
    except (orjson.JSONDecodeError, KeyError, TypeError):
        code, detail = "http-error", response.reason or "no error body"
    return ServerRefused(response.status, code, detail, what)


class OmClient:
    def __init__(self, settings: Settings, *, sealer: Sealer | None = None, token: str | None = None) -> None:
        self.settings = settings
        #: The bearer token the reads from `om serve` show (`omstream.api_tokens`); None: none.
        self.token = token
        self.topics = Topics.of(settings)
        self._producer: AIOKafkaProducer | None = None
        self.sealer = sealer if sealer is not None else sealer_of(settings, repair=False)
        # A command must not overtake a plain producer's message still waiting in the intake.
        self._barrier = IntakeBarrier(settings)

    async def __aenter__(self) -> OmClient:
        self._producer = kafka.idempotent_producer(self.settings)
        await self._producer.start()
        try:
            await self.sealer.start()
            await self._barrier.start()
        except BaseException:
            await self._producer.stop()
            self._producer = None
            await self.sealer.stop()
            raise
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None
        await self._barrier.stop()
        await self.sealer.stop()

    def with_token(self, token: str | None) -> OmClient:
        """This client reading `om serve` with `token`: the same producer and sealer (so not
        entered or left on its own), for a server that reads for several callers, each with
        the token it was shown (`om mcp`)."""
        reader = copy.copy(self)
        reader.token = token
        return reader

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def _key(self, thread_id: str, resource_id: str | None) -> bytes:
        return memory_key(self.settings.om, thread_id, resource_id).encode()

    async def sealed(self, value: bytes, thread_id: str, resource_id: str | None, *, is_message: bool) -> bytes:
        """The record's bytes as the client sends them: its content sealed under its owner's
        data key when the namespace seals, else `value` itself."""
        if not self.sealer.enabled or not _has_content(value):
            return value
        owner = content_owner(memory_key(self.settings.om, thread_id, resource_id), thread_id, is_message=is_message)
        return await self.sealer.seal(value, owner)

    async def send_message(self, message: Message) -> LogPosition:
        """Send one message; its position in the log."""
        [position] = await self.send_messages([message])
        return position

    async def send_messages(self, messages: Iterable[Message]) -> list[LogPosition]:
        """Send in order and wait until the broker has every one. Returns their positions.

        A message the worker would dead-letter on sight (too large, too many parts, not a valid
        message, dated ahead of now) raises `RefusedRecord` before any of them is sent."""
        assert self._producer is not None, "use OmClient as an async context manager"
        batch = list(messages)
        now_ms = round(time.time() * 1000)
        plain = []
        for message in batch:
            if not isinstance(message, Message):
                raise RefusedRecord("invalid", f"send_messages takes Message records, not {type(message).__name__}")
            # No token count: the fold counts every message itself and trusts no other count.
            value = encode(message)
            check_outgoing(self.settings, value, now_ms=now_ms)
            plain.append(value)
        futures = []
        for message, value in zip(batch, plain):
            value = await self.sealed(value, message.thread_id, message.resource_id, is_message=True)
            futures.append(await self._producer.send(
                self.topics.log, value, key=self._key(message.thread_id, message.resource_id)))
        return [_position(await fut) for fut in futures]

    async def step_started(self, thread_id: str, *, step_number: int, resource_id: str | None = None,
                           model: str | None = None, at: datetime | None = None,
                           after_message_id: str | None = None) -> LogPosition:
        return await self.send_control(StepStarted(
            thread_id=thread_id, resource_id=resource_id, step_number=step_number, model=model,
            at=at or datetime.now(UTC), after_message_id=after_message_id))

    async def turn_ended(self, thread_id: str, *, resource_id: str | None = None,
                         at: datetime | None = None, after_message_id: str | None = None) -> LogPosition:
        return await self.send_control(TurnEnded(thread_id=thread_id, resource_id=resource_id,
                                      at=at or datetime.now(UTC), after_message_id=after_message_id))

    async def observe(self, thread_id: str, *, resource_id: str | None = None,
                      request_id: str | None = None) -> LogPosition:
        """Observe the thread's unobserved messages now (manual `observe()`)."""
        return await self.send_control(ObserveRequested(
            thread_id=thread_id, resource_id=resource_id, at=datetime.now(UTC),
            request_id=request_id))

    async def set_title(self, thread_id: str, title: str | None = None, *, pinned: bool | None = None,
                        resource_id: str | None = None, request_id: str | None = None) -> LogPosition:
        """Retitle the thread and/or pin its title, so `threadTitle` cycles stop retitling it
        (`pinned=False` lets them again); `data-om-thread-update` says when the title changed."""
        return await self.send_control(ThreadPatched(
            thread_id=thread_id, resource_id=resource_id, title=title, title_pinned=pinned,
            at=datetime.now(UTC), request_id=request_id))

    async def set_working_memory(self, thread_id: str, working_memory: str | dict[str, Any], *,
                                 resource_id: str | None = None, request_id: str | None = None) -> LogPosition:
        """Replace the memory's working-memory document (markdown, or a JSON object with
        `workingMemory.schema`), as the agent's `updateWorkingMemory` tool does;
        `om-working-memory-updated` says when the memory took it."""
        return await self.send_control(WorkingMemorySet(
            thread_id=thread_id, resource_id=resource_id, working_memory=working_memory,
            at=datetime.now(UTC), request_id=request_id))

    async def reflect(self, thread_id: str, *, prompt: str | None = None,
                      resource_id: str | None = None, request_id: str | None = None) -> LogPosition:
        """Reflect the thread's observations now, optionally guided by `prompt`."""
        return await self.send_control(ReflectRequested(
            thread_id=thread_id, resource_id=resource_id, prompt=prompt,
            at=datetime.now(UTC), request_id=request_id))

    async def play(self, messages: Iterable[ConversationRecord],
                   after_step: Callable[[int], Awaitable[None]] | None = None) -> list[LogPosition]:
        """Send a conversation as an agent loop would: each user message, its step 0, the
        replies, the turn's end (a command of a conversation file where it stands).
        `after_step(n)` runs after the n-th step was sent (a pause, or waiting for the memory to
        settle); the last position returned so far is that step's.  Returns every record's
        position, in order."""
        steps, positions = 0, []
        for record in turns(messages):
            if isinstance(record, Message):
                positions.append(await self.send_message(record))
                continue
            positions.append(await self.send_control(record))
            if isinstance(record, StepStarted):
                steps += 1
                if after_step is not None:
                    await after_step(steps)
        return positions

    async def send_control(self, record: ControlRecord) -> LogPosition:
        """Send an agent-loop marker or a command (keyed by its memory key, like the messages it
        follows); its position in the log.  In resource scope it must name its resource
        (`UnroutedRecord` otherwise, nothing sent: `omstream.schemas.keys`)."""
        assert self._producer is not None, "use OmClient as an async context manager"
        reason = unrouted(self.settings.om, getattr(record, "type", "a control record"), record.thread_id,
                          record.resource_id)
        if reason is not None:  # the worker would dead-letter it: refused here, before sending
            raise UnroutedRecord(reason)
        value = encode(record)
        check_outgoing(self.settings, value)  # and so would it anything else it refuses on sight
        value = await self.sealed(value, record.thread_id, record.resource_id, is_message=False)
        key = self._key(record.thread_id, record.resource_id)
        await self._barrier.settled(key)
        return _position(await self._producer.send_and_wait(self.topics.log, value, key=key))

    async def context(self, thread_id: str, *, after: LogPosition | str | None = None,
                      wait: float = 10.0, base_url: str | None = None,
                      version: str | None = None) -> dict[str, Any] | None:
        """The thread's context window from `om serve` (`base_url`, by default the configured
        web address), in the version it serves or in `version`; None for a thread the
        projection does not know.

        With `after` (a position a send returned), the server first waits up to `wait` seconds
        until the fold's output for that record is in its projection; the answer's `stale` is
        true when it was not in time."""
        import aiohttp

        url = f"{base_url or self.web_url}/threads/{quote(thread_id, safe='')}/context"
        params = {"wait": str(wait)}
        if after is not None:
            params["after"] = str(after)
        if version is not None:
            params["version"] = version
        async with aiohttp.ClientSession(headers=self._headers()) as http:
            async with http.get(url, params=params, timeout=aiohttp.ClientTimeout(total=wait + 30)) as r:
                if r.status == 404:
                    return None
                if r.status >= 400:
                    raise await _refusal(r, f"the context of thread {thread_id!r}")
                window: dict[str, Any] = await r.json()
                return window

    async def events(self, thread_id: str, *, after: int | None = None, types: Iterable[str] | None = None,
                     version: str | None = None, follow: bool = True,
                     base_url: str | None = None) -> AsyncIterator[FeedEvent]:
        """The thread's memory events from `om serve`'s feed, after `seq` `after` (from the
        first without), as typed `FeedEvent`s; with `follow` live and forever, resuming after a
        dropped connection from the last `seq` seen (`Last-Event-ID`), so each event comes once
        and in order; without it, what the server keeps and then the end.  `types` filters by
        event type (`data-om-status`, `om-message-accepted`, ...)."""
        url = f"{base_url or self.web_url}/threads/{quote(thread_id, safe='')}/events"
        async for event in follow_feed(url, after=after, types=types, version=version, follow=follow,
                                       token=self.token):
            yield event

    async def threads(self, *, version: str | None = None, base_url: str | None = None) -> list[dict[str, Any]]:
        """The threads `om serve` knows: `threadId`, `title`, `messages`, `observed`,
        `generation`, `blocked` each."""
        import aiohttp

        params = {"version": version} if version is not None else {}
        async with aiohttp.ClientSession(headers=self._headers()) as http:
            async with http.get(f"{base_url or self.web_url}/threads", params=params,
                                timeout=aiohttp.ClientTimeout(total=30)) as r:
                if r.status >= 400:
                    raise await _refusal(r, "the thread list")
                threads: list[dict[str, Any]] = (await r.json())["threads"]
                return threads

    async def recall(self, thread_id: str, *, after: LogPosition | str | None = None, wait: float = 10.0,
                     base_url: str | None = None, version: str | None = None,
                     **params: Any) -> dict[str, Any] | None:
        """The `recall` tool of spec §12 for `thread_id` (the asking thread), answered by `om serve`:
        `params` are the tool's (`mode`, `cursor`, `page`, `limit`, `detail`, `partIndex`,
        `threadId` for another thread, ...; snake_case works too, but for `threadId`); the answer
        is the tool's result.  None for a thread the server does not
        hold; `RecallError` with the server's reason for parameters it refuses."""
        import aiohttp

        from omstream.projections.recall.params import RecallError

        query = {"wait": str(wait)}
        if after is not None:
            query["after"] = str(after)
        if version is not None:
            query["version"] = version
        body = {_camel(k): v for k, v in params.items() if v is not None}
        url = f"{base_url or self.web_url}/threads/{quote(thread_id, safe='')}/recall"
        async with aiohttp.ClientSession(headers=self._headers()) as http:
            async with http.post(url, params=query, json=body, timeout=aiohttp.ClientTimeout(total=wait + 30)) as r:
                if r.status == 404:
                    return None
                if r.status == 400:
                    raise RecallError((await r.json()).get("detail", "recall refused"))
                if r.status >= 400:
                    raise await _refusal(r, f"recall for thread {thread_id!r}")
                answer: dict[str, Any] = await r.json()
                return answer

    @property
    def web_url(self) -> str:
        """Where `om serve` listens, from the settings."""
        return f"http://{self.settings.web_host}:{self.settings.web_port}"

    async def send_raw(self, topic: str, key: bytes | None, value: bytes) -> LogPosition:
        """Write bytes as they are (for tools and tests of the dead-letter path)."""
        assert self._producer is not None, "use OmClient as an async context manager"
        return _position(await self._producer.send_and_wait(topic, value, key=key))


async def known_thread(settings: Settings, thread_id: str, resource_id: str | None = None, *,
                       sealer: Sealer | None = None) -> bool:
    """Whether an agent sent a message to the thread (since it was last deleted, if it was).

    The log is the truth, so no worker or web server needs to run: this reads, from the start,
    the one partition of `<ns>.log` that holds the thread's memory key
    (the producer's default partitioner, as in `send_messages`), and decodes only the records
    with that key.  A namespace without topics knows no thread.  Sealed records are opened
    (`sealer`, by default the namespace's, started here); one whose key was shredded is passed
    over: its thread was deleted.
    """
    topics = Topics.of(settings)
    key = memory_key(settings.om, thread_id, resource_id).encode()
    layout = await partitions_of(settings.bootstrap, [topics.log])
    if not layout.get(topics.log):
        return False
    records = read_until_end(settings.bootstrap, topics.log, [memory_partition(key, layout[topics.log])])
    sealer = sealer_of(settings, repair=False) if sealer is None else sealer
    if not sealer.enabled:  # read as it streams
        return _known([mark async for record in records
                       if record.key == key and (mark := _thread_mark(record.value, thread_id)) is not None])
    values: Sequence[bytes | None] = [record.value async for record in records if record.key == key]
    if any(is_marked(v) for v in values):
        # Counted: a client's own sealer, already started, stays started.  A record that no
        # longer opens is left out: its thread was deleted.
        await sealer.start()
        try:
            values = await Opener(sealer).open_all(values, key.decode())
        finally:
            await sealer.stop()
    return _known([mark for value in values if (mark := _thread_mark(value, thread_id)) is not None])


def _known(marks: list[bool]) -> bool:
    """In log order, True for a message and False for a deletion: the latest decides."""
    return bool(marks) and marks[-1]


def _thread_mark(value: bytes | None, thread_id: str) -> bool | None:
    """True for a message of the thread, False for its deletion, None for anything else."""
    record = decode_input(value)
    if isinstance(record, Message):
        return True if record.thread_id == thread_id else None
    if isinstance(record, ThreadDeleted) and record.thread_id == thread_id:
        return False
    if isinstance(record, ResourceDeleted) and record.thread_id in (None, thread_id):
        return False
    return None
