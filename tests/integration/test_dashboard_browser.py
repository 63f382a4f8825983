"""The dashboard in a real browser: headless Chromium (Debian's, driven by Playwright's Python API;
never `playwright install`) on `om serve` as its own process, while the worker folds messages
produced through the broker.

The pages are opened before the first message and never reloaded: everything they show arrives
through the SSE feeds.  `om serve` has tokens, so every request the pages make carries the one
in their URL (`?access_token=`); without it the page says access is denied.  The expected figures come from `<ns>.events` itself (the last status's
token windows, the first activation, the messages accepted before it), not from the page.

The two pages show one truth: while a background cycle runs, the thread list's state, the thread
page's badge and a page opened late agree, and the late page's elapsed time counts from the cycle's
start event (its Kafka append time), not from the page's load; once buffering has ended, the
Buffered card is not `running` and counts the chunks the events say, and the header counts the
cycles and activations the Cycles list lists.
"""

import asyncio
import os
import re
import time

import pytest

from omstream.client import OmClient
from tests.helpers import message
from tests.integration.options import om_options
from tests.integration.support import EventWatcher, Server

pytestmark = pytest.mark.integration

CHROMIUM = os.environ.get("OM_CHROMIUM", "/usr/bin/chromium")
THREAD = "dash"
KEY = f"thread:{THREAD}"
# Async buffering with a small observation threshold: chunks are buffered every ~120 tokens and
# activate once the unobserved messages pass 400, a few turns in.  Each model call takes 6 s, so
# the pages have a cycle in progress to show, long enough to open a page in the middle of it.
OPTIONS = om_options(checkThresholdsAt="step", observation={
    "messageTokens": 400, "bufferTokens": 0.3, "modelSettings": {"latencyMs": 6000}})
LATE_MS = 1500  # the age of the running cycle when a page is opened late
WAIT_MS = 30_000
TOKEN = "dashboard-token-0123456789"


async def turns(client: OmClient, first: int, count: int) -> None:
    """An agent loop: user message, step, reply, turn end."""
    for i in range(first, first + count):
        user, reply = message(2 * i, thread=THREAD, words=70), message(2 * i + 1, thread=THREAD, words=70)
        await client.send_message(user)
        await client.step_started(THREAD, step_number=0, at=user.created_at, after_message_id=user.id)
        await client.send_message(reply)
        await client.turn_ended(THREAD, at=reply.created_at, after_message_id=reply.id)


def settled(messages: int):
    """Every message accepted, no background cycle still running, the last input's output complete."""
    def check(events) -> bool:
        mine = [e for e in events if e.memory_key == KEY]
        if not mine or not events[-1].input_last:
            return False
        count = lambda kind: sum(e.type == kind for e in mine)  # noqa: E731
        return (count("om-message-accepted") == messages and count("data-om-buffering-start")
                == count("data-om-buffering-end") + count("data-om-buffering-failed"))
    return check


class TimedWatcher(EventWatcher):
    """An `EventWatcher` that also keeps each event's Kafka append time (ms), by event id."""

    def __init__(self, settings) -> None:
        super().__init__(settings)
        self.appended: dict[str, int] = {}

    async def wait_for(self, predicate, timeout: float = 60.0) -> list:
        from omstream.schemas.codec import decode_event

        deadline = time.monotonic() + timeout
        while not predicate(self.events):
            if time.monotonic() > deadline:
                raise TimeoutError(f"condition not met after {timeout}s; {len(self.events)} events read")
            batch = await self._consumer.getmany(timeout_ms=100)
            for record in (r for rs in batch.values() for r in rs):
                event = decode_event(record.value)
                self.appended[event.event_id] = record.timestamp
                self.events.append(event)
        return self.events


def running_buffering(events) -> list:
    """The memory's buffering starts not yet ended or failed."""
    mine = [e for e in events if e.memory_key == KEY]
    ended = {e.data.cycle_id for e in mine if e.type in ("data-om-buffering-end", "data-om-buffering-failed")}
    return [e for e in mine if e.type == "data-om-buffering-start" and e.data.cycle_id not in ended]


def buffered_after_the_last_status(events) -> tuple[str, int]:
    """(status, chunks) of the observation buffer: the last status's chunks, plus the buffering
    ends since, minus the chunks activated since; `running` while a buffering cycle is in flight."""
    mine = [e for e in events if e.memory_key == KEY]
    last = max(i for i, e in enumerate(mine) if e.type == "data-om-status")
    chunks = mine[last].data.windows.buffered.observations.chunks
    for e in mine[last + 1:]:
        if e.type == "data-om-buffering-end" and e.data.operation_type == "observation":
            chunks += 1
        elif e.type == "data-om-activation" and e.data.operation_type == "observation":
            chunks = max(chunks - e.data.chunks_activated, 0)
    status = "running" if running_buffering(events) else "complete" if chunks else "idle"
    return status, chunks


def counted(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def last_status_tokens(events, before: int | None = None) -> tuple[int, int]:
    """(message tokens, observation tokens) of the memory's last status (before a seq)."""
    status = [e for e in events if e.memory_key == KEY and e.type == "data-om-status"
              and (before is None or e.seq < before)][-1]
    active = status.data.windows.active
    return active.messages.tokens, active.observations.tokens


def test_the_dashboard_follows_a_memory_live_and_its_timeline_shows_an_earlier_window(new_env, tmp_path, monkeypatch):
    from playwright.async_api import async_playwright, expect

    assert os.path.exists(CHROMIUM), f"{CHROMIUM} is missing: apt-get install chromium (.ci/run does)"
    env = new_env(options=OPTIONS)
    env.start_worker()
    monkeypatch.setenv("OM_API_TOKENS", f"{TOKEN} = *")  # read by `om serve` (its child process)
    shots = tmp_path / "screenshots"
    shots.mkdir()
    errors: list[str] = []

    async def scenario():
        server = Server(env.settings, tmp_path / "serve.log")
        try:
            await server.ready()
            async with async_playwright() as pw, OmClient(env.settings) as client, TimedWatcher(env.settings) as watcher:
                browser = await pw.chromium.launch(executable_path=CHROMIUM)
                page = await browser.new_page(viewport={"width": 1400, "height": 1000})
                page.on("pageerror", lambda exc: errors.append(str(exc)))
                started = time.monotonic()

                # 1. The thread list, open before the thread exists, shows it when it appears
                # (`listing` stays on the list: its state column is checked against the thread page).
                listing = await browser.new_page()
                listing.on("pageerror", lambda exc: errors.append(str(exc)))
                for each in (page, listing):
                    await each.goto(f"{server.url}/?access_token={TOKEN}")
                    await expect(each.locator("#conn")).to_have_text("live", timeout=WAIT_MS)
                await turns(client, 0, 1)
                row = page.locator(f'tr[data-thread="{THREAD}"]')
                await expect(row).to_be_visible(timeout=WAIT_MS)
                listed_state = listing.locator(f'tr[data-thread="{THREAD}"] td.state .badge')
                await page.screenshot(path=shots / "threads.png")

                # 2. The memory's page, reached by its link: the first turn's token count.
                await row.locator("a").click()
                await page.wait_for_url(re.compile(rf"/threads/{THREAD}\?access_token={TOKEN}$"))  # the link carries it
                events = await watcher.wait_for(settled(2))
                first_tokens, _ = last_status_tokens(events)
                messages_tokens = page.locator("#win-messages .tokens")
                await expect(messages_tokens).to_have_attribute("data-tokens", str(first_tokens), timeout=WAIT_MS)
                await expect(page.locator("#observations .empty")).to_be_visible()

                # 3. More turns, no reload: new token counts, an activation, the observation text.
                await turns(client, 1, 2)
                # A background cycle in progress (each takes 6 s), with its elapsed time; once it
                # has run LATE_MS (by its start event's append time), a page opened now counts
                # from that start, and the list, this page and the late one say the same.
                running = page.locator("#activity .badge.running").first
                await expect(running).to_have_text(re.compile(r"^buffering observations \d+\.\d s$"), timeout=WAIT_MS)
                await expect(listed_state.first).to_have_attribute("data-label", "buffering observations")
                events = await watcher.wait_for(lambda evs: any(
                    time.time() * 1000 - watcher.appended[e.event_id] >= LATE_MS for e in running_buffering(evs)))
                start = running_buffering(events)[0]
                opened_at = time.time() * 1000
                late = await browser.new_page()
                late.on("pageerror", lambda exc: errors.append(str(exc)))
                await late.goto(f"{server.url}/threads/{THREAD}?access_token={TOKEN}")
                late_badge = late.locator("#activity .badge.running").first
                await expect(late_badge).to_have_text(re.compile(r"^buffering observations \d+\.\d s$"), timeout=WAIT_MS)
                shown = float(re.search(r"(\d+\.\d) s$", await late_badge.text_content()).group(1))
                age = (opened_at - watcher.appended[start.event_id]) / 1000
                assert shown >= age - 0.3, f"a page opened {age:.1f} s into the cycle shows {shown} s"
                await expect(late_badge).to_have_attribute("data-label", "buffering observations")
                await late.close()
                await turns(client, 3, 3)
                events = await watcher.wait_for(lambda evs: settled(12)(evs) and any(
                    e.memory_key == KEY and e.type == "data-om-activation" for e in evs), timeout=180)
                now_tokens, now_observations = last_status_tokens(events)
                await expect(messages_tokens).to_have_attribute("data-tokens", str(now_tokens), timeout=WAIT_MS)
                await expect(page.locator("#win-observations .tokens")).to_have_attribute(
                    "data-tokens", str(now_observations), timeout=WAIT_MS)
                await expect(page.locator('#cycles li[data-kind="activation"]').first).to_be_visible(timeout=WAIT_MS)
                await expect(page.locator("#timeline .marker.activation").first).to_be_attached()
                await expect(page.locator("#observations .obs-date").first).to_be_visible(timeout=WAIT_MS)
                # The scripted observer writes a line per transcript line: the first message's is there.
                await expect(page.locator("#observations")).to_contain_text("[0] ", timeout=WAIT_MS)
                # Buffering has ended: the card, the badges and the list agree with the events.
                status, chunks = buffered_after_the_last_status(events)
                assert status != "running"
                await expect(page.locator("#buffered-status .pill")).to_have_text(status, timeout=WAIT_MS)
                await expect(page.locator("#buffered-chunks")).to_have_attribute("data-chunks", str(chunks))
                for badge in (page.locator("#activity .badge").first, listed_state.first):
                    await expect(badge).to_have_attribute("data-label", "idle", timeout=WAIT_MS)
                await expect(listed_state).to_have_count(1)
                # The header counts the Cycles list's entries: the cycles (failed ones are listed
                # as failures) and the activations, as the events have them.
                mine = [e for e in events if e.memory_key == KEY]
                failed = {e.data.cycle_id for e in mine if e.type.endswith("-failed")}
                cycles = sum(e.type.endswith("-start") and e.data.cycle_id not in failed for e in mine)
                activations = sum(e.type == "data-om-activation" for e in mine)
                await expect(page.locator("#cycles li[data-kind]:not([data-kind=activation])")).to_have_count(cycles)
                await expect(page.locator('#cycles li[data-kind="activation"]')).to_have_count(activations)
                meta = page.locator("#thread-meta")
                await expect(meta).to_contain_text(f" · {counted(cycles, 'cycle')} · {counted(activations, 'activation')} · ")
                live_raw = await page.locator("#messages li[data-id]").count()
                live_seconds = time.monotonic() - started
                await page.screenshot(path=shots / "live.png")
                full = shots / "live-full.png"
                await page.screenshot(path=full, full_page=True)

                # 4. The cursor just before the first activation: the window as it was then.
                mine = [e for e in events if e.memory_key == KEY]
                first = next(e for e in mine if e.type == "data-om-activation")
                accepted = [e.data.message.id for e in mine if e.type == "om-message-accepted" and e.seq < first.seq]
                then_tokens, _ = last_status_tokens(events, before=first.seq)
                await page.locator("#cursor").fill(str(first.seq - 1))
                await expect(page.locator("#asof-banner")).to_be_visible()
                await expect(page.locator("#asof-text")).to_contain_text(f"#{first.seq - 1}", timeout=WAIT_MS)
                await expect(page.locator("#observations .empty")).to_be_visible(timeout=WAIT_MS)
                await expect(page.locator("#messages li[data-id]")).to_have_count(len(accepted), timeout=WAIT_MS)
                await expect(messages_tokens).to_have_attribute("data-tokens", str(then_tokens))
                await page.screenshot(path=shots / "as-of.png")

                # 5. Without the token the data routes refuse the page, and it says so.
                stranger = await browser.new_page()
                await stranger.goto(f"{server.url}/threads/{THREAD}")
                await expect(stranger.locator("#conn")).to_have_text("access denied", timeout=WAIT_MS)
                await expect(stranger.locator("#messages li[data-id]")).to_have_count(0)

                # 6. Back to live.
                await page.locator("#go-live").click()
                await expect(page.locator("#asof-banner")).to_be_hidden()
                await expect(page.locator("#messages li[data-id]")).to_have_count(live_raw)
                await expect(page.locator("#observations .obs-date").first).to_be_visible()

                # 7. A turn far past blockAfter: its step blocks on a cycle (6 s), the reply and
                # the turn's end are held behind it; both pages show it, until the release.
                big, reply = message(40, thread=THREAD, words=700), message(41, thread=THREAD, words=20)
                await client.send_message(big)
                await client.step_started(THREAD, step_number=0, at=big.created_at, after_message_id=big.id)
                await client.send_message(reply)
                await client.turn_ended(THREAD, at=reply.created_at, after_message_id=reply.id)
                events = await watcher.wait_for(lambda evs: any(
                    e.memory_key == KEY and e.type == "om-input-held" and e.data.held == 2 for e in evs))
                holding = page.locator('#activity .badge[data-kind="held"]')
                await expect(holding).to_have_text(re.compile(r"^holding [12] inputs? \d+\.\d s$"), timeout=WAIT_MS)
                await expect(listing.locator(f'tr[data-thread="{THREAD}"] td.state .badge.blocked')).to_have_attribute(
                    "data-label", re.compile(r"^holding [12] inputs?$"), timeout=WAIT_MS)
                await page.screenshot(path=shots / "held.png")
                await watcher.wait_for(lambda evs: any(
                    e.memory_key == KEY and e.type == "om-input-released" for e in evs), timeout=120)
                await expect(holding).to_have_count(0, timeout=WAIT_MS)
                await browser.close()
                return (first_tokens, now_tokens, now_observations, first.seq, len(accepted), then_tokens, live_raw,
                        live_seconds)
        finally:
            server.stop()

    first_tokens, now_tokens, now_obs, activation_seq, then_raw, then_tokens, live_raw, seconds = asyncio.run(scenario())
    print(f"\nmessage tokens on the page: {first_tokens} after one turn, {now_tokens} after six "
          f"(observations {now_obs}); first activation at seq {activation_seq}; the timeline before it shows "
          f"{then_raw} unobserved messages ({then_tokens} tokens) and no observations, live shows {live_raw}; "
          f"{seconds:.1f} s from the page's open to the live evidence; screenshots in {shots}")
    assert not errors, errors
    assert now_tokens != first_tokens and then_raw > 0
