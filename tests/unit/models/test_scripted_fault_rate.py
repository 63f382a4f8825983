"""Rate-based failure injection of the scripted provider (`failRate`, a `failWith` list,
`failOnly`), which the chaos test uses: a share of the requests fails, chosen by a hash of the
request, the same ones in every run and every process, each once before it answers normally."""

import asyncio
import random
from collections import Counter
from datetime import UTC, datetime

import pytest

from omstream.engine.prompting.parsing import is_degenerate, parse_observer_output
from omstream.models.calls import RetryPolicy, run_job
from omstream.models.scripted import FAILURES, failure_for, planned_failure, reset_failures
from omstream.schemas.jobs import ChatMessage, ModelJob, request_hash

OBSERVER = "scripted/observer"
KINDS = ["timeout", "429", "500", "malformed", "degenerate"]


def request(n: int, marker: str = "") -> list[dict[str, str]]:
    return [{"role": "system", "content": "answer with <current-task> too"},
            {"role": "user", "content": "## New Message History to Observe\n\nMar 3 2025:\n"
                                        f"User (9:05 AM): {marker}message number {n}"}]


def job(messages: list[dict[str, str]], settings: dict, model: str = OBSERVER,
        kind: str = "observe") -> ModelJob:
    chat = tuple(ChatMessage(role=m["role"], content=m["content"]) for m in messages)
    return ModelJob(kind=kind, cycle_id="c1", memory_key="thread:t", thread_id="t", generation=0,
                    model=model, messages=chat, settings=settings,
                    request_hash=request_hash(model, chat, settings),
                    created_at=datetime(2025, 3, 3, tzinfo=UTC))


async def _no_sleep(_seconds: float) -> None:
    return None


def run(j: ModelJob, retries: int = 2):
    return asyncio.run(run_job(j, RetryPolicy(retries=retries, base_ms=1), rng=random.Random(7),
                               sleep=_no_sleep))


@pytest.fixture(autouse=True)
def _fresh_failure_counts():
    reset_failures()
    yield
    reset_failures()


def test_the_rate_picks_a_share_of_requests_by_their_content():
    settings = {"failRate": 0.3, "failWith": KINDS}
    planned = [planned_failure(OBSERVER, request(n), settings) for n in range(4000)]
    share = sum(p is not None for p in planned) / len(planned)
    assert 0.27 < share < 0.33
    by_kind = Counter(p for p in planned if p is not None)
    assert set(by_kind) == set(KINDS)
    assert min(by_kind.values()) > 0.15 * sum(by_kind.values())  # each about a fifth
    # The same request draws the same kind, every time and in any process (no randomness).
    assert planned == [planned_failure(OBSERVER, request(n), settings) for n in range(4000)]
    # The seed and the model are part of the draw; the other settings are not.
    seeded = [planned_failure(OBSERVER, request(n), {**settings, "failSeed": 2}) for n in range(200)]
    assert seeded != planned[:200]
    assert planned[:200] == [planned_failure(OBSERVER, request(n), {**settings, "userWords": 5})
                             for n in range(200)]


def test_rate_zero_never_fails_and_rate_one_always_does():
    assert all(planned_failure(OBSERVER, request(n), {"failRate": 0, "failWith": KINDS}) is None
               for n in range(500))
    assert all(planned_failure(OBSERVER, request(n), {"failRate": 1, "failWith": KINDS}) in KINDS
               for n in range(500))


def test_a_failing_request_fails_fail_times_calls_then_answers():
    settings = {"failRate": 1, "failWith": ["500"]}
    assert [failure_for(OBSERVER, request(1), settings) for _ in range(3)] == ["500", None, None]
    twice = {**settings, "failTimes": 2}
    assert [failure_for(OBSERVER, request(2), twice) for _ in range(3)] == ["500", "500", None]
    # Without failRate the old meaning stays: every call fails unless failTimes says otherwise.
    assert [failure_for(OBSERVER, request(3), {"failWith": "429"}) for _ in range(3)] == ["429"] * 3


def test_fail_only_confines_a_kind_to_requests_with_its_text():
    settings = {"failRate": 0.5, "failWith": KINDS,
                "failOnly": {"malformed": "FRAGILE", "degenerate": "FRAGILE"}}
    plain = Counter(planned_failure(OBSERVER, request(n), settings) for n in range(3000))
    marked = Counter(planned_failure(OBSERVER, request(n, "FRAGILE "), settings) for n in range(3000))
    assert set(plain) == {None, "timeout", "429", "500"}
    assert set(marked) == {None, *KINDS}
    # The rate is the same for both: confining a kind moves its requests to the other kinds.
    assert abs(plain[None] - marked[None]) < 200
    only_answers = {**settings, "failWith": ["malformed"]}
    assert all(planned_failure(OBSERVER, request(n), only_answers) is None for n in range(300))


def test_fail_model_still_applies():
    settings = {"failRate": 1, "failWith": ["500"], "failModel": "scripted/reflector"}
    assert planned_failure(OBSERVER, request(1), settings) is None
    assert planned_failure("scripted/reflector", request(1), settings) == "500"


@pytest.mark.parametrize("bad", [
    {"failRate": 1.5, "failWith": "500"},
    {"failRate": "often", "failWith": "500"},
    {"failRate": 0.5, "failWith": ["500", "gremlins"]},
    {"failRate": 0.5, "failWith": []},
    {"failRate": 0.5, "failWith": "500", "failOnly": {"gremlins": "x"}},
    {"failRate": 0.5, "failWith": "500", "failOnly": "FRAGILE"},
])
def test_bad_settings_are_refused(bad):
    with pytest.raises(ValueError):
        planned_failure(OBSERVER, request(1), bad)
    result = run(job(request(1), bad), retries=3)  # through litellm: a bad request, not retried
    assert not result.ok and result.attempts == 1 and result.error_code == "bad-request"


# --- through the real litellm path ----------------------------------------------------------------
def _failing(kinds: list[str], kind: str) -> list[dict[str, str]]:
    """A request that draws `kind` at rate 1 from `kinds`."""
    settings = {"failRate": 1, "failWith": kinds}
    return next(m for n in range(1000) for m in [request(n)]
                if planned_failure(OBSERVER, m, settings) == kind)


@pytest.mark.parametrize("kind, code", [("timeout", "timeout"), ("429", "rate-limited"),
                                        ("500", "server-error")])
def test_transient_kinds_are_retried_and_answered(kind, code):
    kinds = ["timeout", "429", "500"]
    messages = _failing(kinds, kind)
    settings = {"failRate": 1, "failWith": kinds}
    result = run(job(messages, settings))
    assert result.ok and result.attempts == 2 and "User said" in result.output
    reset_failures()
    failed = run(job(messages, settings), retries=0)
    assert not failed.ok and failed.attempts == 1 and failed.error_code == code


def test_answer_kinds_answer_badly_once_then_well():
    settings = {"failRate": 1, "failWith": ["malformed", "degenerate"]}
    malformed = _failing(settings["failWith"], "malformed")
    first, second = run(job(malformed, settings)), run(job(malformed, settings))
    assert first.ok and first.attempts == 1 and parse_observer_output(first.output).observations == ""
    assert second.ok and "User said" in second.output
    degenerate = _failing(settings["failWith"], "degenerate")
    answer = run(job(degenerate, settings))
    assert answer.ok and is_degenerate(answer.output)
    assert "User said" in run(job(degenerate, settings)).output


def test_every_kind_listed_is_known():
    assert set(KINDS) <= set(FAILURES)
