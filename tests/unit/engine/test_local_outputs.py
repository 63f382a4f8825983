"""The parser on real answers of the local model (`tests/fixtures/local_model/`, made by
`python -m bench.corpus`, and exported from `bench.quality` runs by `python -m bench.quality
--conversation N ... --export-corpus tests/fixtures/local_model/`), and each recovery on small
hand-written answers.

`OM_LOCAL_CORPUS=<folder>` adds the fixtures of a folder outside the repository (the export of
a LoCoMo run, whose answers quote the data set and so are never committed).

Every fixture is an actual output of `local/qwen2.5-1.5b`; `prompt_version` says which prompts
produced it (v1: the prompts before the small-model rewrite, v2: after; `lq`: a bench.quality
run on a LoCoMo conversation, whole sessions with the speaker instruction).  Run with `-s` to see
the share of answers parsed clean / recovered / failed per prompt version.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter, defaultdict
from datetime import UTC, datetime
from pathlib import Path

import pytest

from omstream.engine.prompting.parsing import (
    RECOVERIES,
    is_degenerate,
    parse_observer_output,
    parse_outcome,
)
from omstream.engine.prompting.prompts import (
    FORMAT_EXAMPLE_LINES,
    observer_system_prompt,
    observer_user_prompt,
    reflector_system_prompt,
    reflector_user_prompt,
)
from omstream.engine.prompting.transcript import TranscriptLine, render_transcript
from omstream.models import scripted

ROOT = Path(__file__).resolve().parents[3]
# Outputs exported from runs on LoCoMo quote its conversations, which never enter the repository
# (CC BY-NC): such a corpus is kept outside and named by OM_LOCAL_CORPUS, a folder of fixtures.
EXTRA = os.environ.get("OM_LOCAL_CORPUS", "")
FIXTURES = sorted([*(ROOT / "tests/fixtures/local_model").glob("*.json"),
                   *(Path(EXTRA).glob("*.json") if EXTRA else [])])
OBSERVATION = re.compile(r"^\* (?:🔴|🟡|🟢|✅) \(\d{2}:\d{2}\) \S")
SUB = re.compile(r"^\s+\* \S")


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


def _previous(fixture: dict) -> str:
    """The previous observations the fixture's prompt showed (the parser drops repeats of them)."""
    user = fixture["user_message"]
    if fixture["kind"] != "observe" or not user.startswith("## Previous Observations\n\n"):
        return ""
    return user[len("## Previous Observations\n\n"):].split("\n\n---\n\n")[0]


def _content(line: str) -> str:
    text = re.sub(r"^\s*\*\s+(?:🔴|🟡|🟢|✅|->)?\s*(?:\(\d{2}:\d{2}\))?\s*", "", line)
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


EXAMPLES = {_content(f"* {line}") for line in FORMAT_EXAMPLE_LINES}

MIN_FIXTURES = 31  # the issue asks for at least 30
#: The batches of `bench.corpus` (hand-checked expectations below); other versions were exported
#: from bench.quality runs and carry `parsed_at_export`, the parser's reading when exported.
CORPUS_VERSIONS = {"v1", "v2", "v3", "v4"}

#: What the parser reports for each answer (checked by reading each fixture): its recoveries,
#: empty for a clean answer.
EXPECTED_RECOVERIES: dict[str, set[str]] = {
    "v1-demo-01": {'example-copied'},
    "v1-demo-07": set(),
    "v1-long-thread-01": {'time-format', 'example-copied'},
    "v1-long-thread-02": {'prose-dropped', 'repeated-lines'},
    "v1-reflect-demo": set(),
    "v1-reflect-long-thread": {'prose-dropped'},
    "v3-demo-01": set(),
    "v4-demo-01": set(),
    "v4-demo-05": set(),
    "v4-long-thread-01": {'prose-dropped'},
    "v4-long-thread-02": set(),
    "v4-long-thread-03": {'repeated-lines'},
    "v4-long-thread-04": set(),
    "v4-long-thread-05": {'prose-dropped'},
    "v4-reflect-demo": {'example-copied'},
    "v4-reflect-long-thread": {'missing-tags', 'prose-dropped'},
}
#: Answers that cannot be used (the cycle fails, as for any empty or degenerate answer), and why.
EXPECTED_FAILED: dict[str, str] = {
    "v1-demo-02": "only writes previous observations out again",
    "v1-demo-03": "only writes previous observations out again",
    "v1-demo-04": "only writes previous observations out again",
    "v1-demo-05": "only writes previous observations out again",
    "v1-demo-06": "only writes previous observations out again",
    "v1-long-thread-03": "only writes previous observations out again",
    "v1-long-thread-04": "only writes previous observations out again",
    "v2-demo-01": "no observation lines at all",
    "v3-demo-02": "only writes previous observations out again",
    "v3-demo-03": "only writes previous observations out again",
    "v4-demo-02": "only writes previous observations out again",
    "v4-demo-03": "only writes previous observations out again",
    "v4-demo-04": "only writes previous observations out again",
    "v4-demo-06": "only writes previous observations out again",
    "v4-demo-07": "only writes previous observations out again",
}


# --- the corpus --------------------------------------------------------------------------------
def test_the_corpus_is_large_enough_and_real():
    assert len(FIXTURES) >= MIN_FIXTURES
    kinds = Counter(_load(p)["kind"] for p in FIXTURES)
    assert kinds["observe"] >= MIN_FIXTURES - 4
    versions = Counter(_load(p)["prompt_version"] for p in FIXTURES)
    assert set(versions) >= CORPUS_VERSIONS
    for path in FIXTURES:
        f = _load(path)
        assert f["model"] == "local/qwen2.5-1.5b" and f["kind"] in ("observe", "reflect")
        if f["prompt_version"] in CORPUS_VERSIONS:
            assert f["settings"]["max_tokens"] == 256 and f["settings"]["temperature"] == 0.2
        else:  # exported from a bench.quality run's checkpoint
            assert f["source"]["benchmark"] == "bench.quality (LoCoMo)" and f["source"]["requestHash"]
            assert f["parsed_at_export"]["outcome"] in ("clean", "recovered", "failed")
        assert f["user_message"] and f["system_prompt"] and f["raw_output"] and f["generated_at"]
        assert path.stem.startswith(f["prompt_version"] + "-")
        if f["prompt_version"] == "v4":  # the prompts now in the tree made the v4 batch
            assert f["system_prompt"] == (observer_system_prompt() if f["kind"] == "observe"
                                          else reflector_system_prompt())


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_every_fixture_parses_to_the_contract(path: Path):
    f = _load(path)
    if not f["ok"]:  # a call that failed (no answer): nothing to parse
        pytest.skip(f"call failed: {f['error']}")
    raw = f["raw_output"]
    parsed = parse_observer_output(raw, _previous(f))
    outcome = parse_outcome(raw, _previous(f))
    assert set(parsed.recovered) <= set(RECOVERIES)
    exported = f.get("parsed_at_export")
    if path.stem in EXPECTED_FAILED or (exported and exported["outcome"] == "failed"):
        assert outcome == "failed"
        return
    assert outcome in ("clean", "recovered")
    assert (outcome == "recovered") == bool(parsed.recovered)
    # every bench.corpus fixture was read; an exported one is held to the reading it was exported with
    expected = set(exported["recoveries"]) if exported else EXPECTED_RECOVERIES[path.stem]
    assert set(parsed.recovered) == expected
    top: list[str] = []
    for line in parsed.observations.split("\n"):
        if not line.strip() or line.startswith("Date: "):
            continue
        if f["kind"] == "observe":
            # every observation has a priority and a time; sub-bullets hang under one
            assert OBSERVATION.match(line) or SUB.match(line), line
        if line.startswith("* "):
            top.append(_content(line))
        assert _content(line) not in EXAMPLES, f"example line survived: {line}"
    assert top, "no observation line"
    assert len(top) == len(set(top)), "a content line is repeated"
    shown = {_content(line) for line in _previous(f).split("\n") if line.startswith("* ")}
    assert not set(top) & shown, "a previous observation is repeated"
    if outcome == "clean":  # clean means the spec's own parser reads it the same way
        block = re.search(r"^[ \t]*<observations>([\s\S]*?)^[ \t]*</observations>", raw, re.MULTILINE)
        assert block and parsed.observations == block.group(1).strip()


def test_share_of_answers_parsed_clean_recovered_failed():
    """Prints, per prompt version, the share of answers parsed without recovery, with recovery,
    not at all; the kinds of recovery; mean output tokens and seconds per call."""
    rows: dict[tuple[str, str], Counter] = defaultdict(Counter)
    kinds: dict[str, Counter] = defaultdict(Counter)
    tokens: dict[str, list[int]] = defaultdict(list)
    seconds: dict[str, list[float]] = defaultdict(list)
    for path in FIXTURES:
        f = _load(path)
        version = f["prompt_version"]
        outcome = parse_outcome(f["raw_output"], _previous(f)) if f["ok"] else "failed"
        rows[(version, f["kind"])][outcome] += 1
        rows[(version, "all")][outcome] += 1
        if f["kind"] == "observe":  # a small model mostly fails once it is shown earlier observations
            rows[(version, "obs+prev" if _previous(f) else "obs-prev")][outcome] += 1
        kinds[version].update(parse_observer_output(f["raw_output"], _previous(f)).recovered)
        if f["usage"]["output_tokens"] is not None:
            tokens[version].append(f["usage"]["output_tokens"])
        seconds[version].append(f["seconds"])
    print("\nlocal/qwen2.5-1.5b answers (tests/fixtures/local_model):")
    print("(obs-prev / obs+prev: observer prompts without / with previous observations)")
    print(f"{'prompts':8} {'kind':8} {'n':>3} {'clean':>7} {'recovered':>10} {'failed':>7}")
    for (version, kind), c in sorted(rows.items()):
        n = sum(c.values())
        print(f"{version:8} {kind:8} {n:>3} {c['clean'] / n:>7.0%} {c['recovered'] / n:>10.0%} "
              f"{c['failed'] / n:>7.0%}")
    for version in sorted(kinds):
        mean_tokens = sum(tokens[version]) / max(1, len(tokens[version]))
        mean_seconds = sum(seconds[version]) / max(1, len(seconds[version]))
        print(f"{version}: mean {mean_tokens:.0f} output tokens, {mean_seconds:.0f} s per call; "
              f"recoveries: {dict(kinds[version].most_common())}")
    assert rows


# --- the scripted models keep the contract exactly ---------------------------------------------
def _long_thread(indices: range) -> str:
    rows = [json.loads(line) for line in
            (ROOT / "tests/fixtures/scenarios/long-thread/conversation.jsonl").read_text().splitlines()]
    return render_transcript(
        TranscriptLine(datetime.fromisoformat(rows[i]["createdAt"].replace("Z", "+00:00"))
                       .astimezone(UTC), rows[i]["role"].capitalize(), rows[i]["content"])
        for i in indices)


@pytest.mark.parametrize("start", [0, 40, 100])
def test_scripted_answers_parse_clean_and_unchanged(start: int):
    user = observer_user_prompt(transcript=_long_thread(range(start, start + 20)))
    answer = scripted.observe(observer_system_prompt(), user)
    assert parse_outcome(answer) == "clean"
    parsed = parse_observer_output(answer)
    assert parsed.recovered == ()
    assert parsed.observations == answer.split("<observations>\n")[1].split("\n</observations>")[0]
    for level in range(5):
        reflection = scripted.reflect(reflector_system_prompt(), reflector_user_prompt(
            observations=parsed.observations * 1, level=level))
        assert parse_outcome(reflection) == "clean", level
        assert parse_observer_output(reflection).observations == \
            reflection.split("<observations>\n")[1].split("\n</observations>")[0]


# --- each recovery on a small answer -----------------------------------------------------------
def _parse(raw: str):
    parsed = parse_observer_output(raw)
    return parsed, set(parsed.recovered), parse_outcome(raw)


def test_clean_answer_is_clean():
    raw = ("<observations>\nDate: May 2, 2026\n* 🔴 (18:00) User stated they plan a trip\n"
           "  * -> looked up trains\n  * ✅ ticket booked\n* ✅ (18:05) Route agreed\n</observations>\n\n"
           "<current-task>\nPrimary: plan\n</current-task>\n<suggested-response>\nAsk\n</suggested-response>")
    parsed, kinds, outcome = _parse(raw)
    assert outcome == "clean" and kinds == set()
    assert parsed.current_task == "Primary: plan" and parsed.suggested_response == "Ask"


def test_missing_tags_unclosed_block():
    parsed, kinds, outcome = _parse("<observations>\nDate: May 2, 2026\n* 🔴 (18:00) User plans a trip\n"
                                    "* 🟡 (18:00) Assistant suggested Vienne")
    assert outcome == "recovered" and kinds == {"missing-tags"}
    assert parsed.observations.endswith("* 🟡 (18:00) Assistant suggested Vienne")


def test_missing_tags_block_cut_by_the_sections():
    parsed, kinds, _ = _parse("<observations>\n* 🔴 (18:00) User plans a trip\n\n"
                              "<current-task>\nPrimary: trip\n</current-task>")
    assert kinds == {"missing-tags"} and parsed.observations == "* 🔴 (18:00) User plans a trip"
    assert parsed.current_task == "Primary: trip"


def test_missing_tags_no_block_at_all_keeps_list_lines():
    parsed, kinds, _ = _parse("* 🔴 (18:00) User plans a trip\n* 🟡 (18:01) Assistant replied")
    assert kinds == {"missing-tags"}
    assert parsed.observations == "* 🔴 (18:00) User plans a trip\n* 🟡 (18:01) Assistant replied"


def test_prose_around_the_list_is_dropped():
    parsed, kinds, _ = _parse("Here are the observations:\n<observations>\nSure, the notes:\n"
                              "* 🔴 (18:00) User plans a trip\n</observations>\nHope this helps!")
    assert kinds == {"prose-dropped"} and parsed.observations == "* 🔴 (18:00) User plans a trip"


def test_code_fences_are_prose():
    parsed, kinds, _ = _parse("```\n<observations>\n* 🔴 (18:00) User plans a trip\n</observations>\n```")
    assert kinds == {"prose-dropped"} and parsed.observations == "* 🔴 (18:00) User plans a trip"


def test_an_echoed_transcript_message_goes_with_its_continuation_lines():
    # lq-conv2-observe-010: the model copied a message and its photo caption into the block
    raw = ("<observations>\nDate: Jun 16, 2023\n* 🔴 (19:20) Maria asked about John's work\n"
           "User (3:06 PM): Maria: Wow John, keep shining!\n[shares a photo: a playground]\n\n"
           "Date: Jun 27, 2023\n* 🟡 (00:22) John relies on his friends\nA reflection's paragraph stays.\n"
           "* 🟡 (00:23) John is running for office\n</observations>")
    parsed, kinds, outcome = _parse(raw)
    assert outcome == "recovered" and kinds == {"prose-dropped"}
    assert "playground" not in parsed.observations and "Wow John" not in parsed.observations
    assert "A reflection's paragraph stays." in parsed.observations


def test_prose_between_list_lines_stays():  # a reflection's paragraph is content
    raw = ("<observations>\nDate: May 2, 2026\nThe user planned a ten-day ride.\n"
           "* 🔴 (18:00) User plans a trip\n</observations>")
    parsed, kinds, outcome = _parse(raw)
    assert outcome == "clean" and "The user planned a ten-day ride." in parsed.observations


def test_priority_added():
    parsed, kinds, _ = _parse("<observations>\n* (18:00) User plans a trip\n"
                              "* High: (18:01) User's knee is sore\n* [low] (18:02) Weather ok\n</observations>")
    assert kinds == {"priority-added"}
    assert parsed.observations.split("\n") == [
        "* 🟡 (18:00) User plans a trip", "* 🔴 (18:01) User's knee is sore", "* 🟢 (18:02) Weather ok"]


def test_list_format():
    parsed, kinds, _ = _parse("<observations>\n- 🔴 (18:00) User plans a trip\n1. 🟡 (18:01) Replied\n"
                              "* (18:02) 🟢 Minor\n</observations>")
    assert kinds == {"list-format"}
    assert parsed.observations.split("\n") == [
        "* 🔴 (18:00) User plans a trip", "* 🟡 (18:01) Replied", "* 🟢 (18:02) Minor"]


def test_time_format():
    parsed, kinds, _ = _parse("<observations>\n* 🔴 (6:00 PM) User plans a trip\n* 🔴 18:03 - Sister joins\n"
                              "* 🟡 [09:15] Checked\n* 🟡 (12:05 AM) Late\n* 🟢 Noted it (7:10 pm)\n</observations>")
    assert kinds == {"time-format"}
    assert parsed.observations.split("\n") == [
        "* 🔴 (18:00) User plans a trip", "* 🔴 (18:03) Sister joins", "* 🟡 (09:15) Checked",
        "* 🟡 (00:05) Late", "* 🟢 (19:10) Noted it"]


def test_time_added_from_the_line_before():
    parsed, kinds, _ = _parse("<observations>\n* 🔴 (18:00) User plans a trip\n* 🟡 Assistant replied\n</observations>")
    assert kinds == {"time-added"} and parsed.observations.endswith("* 🟡 (18:00) Assistant replied")


def test_date_format():
    for line in ("May 2 2026:", "Date: 2026-05-02", "**Date: May 2, 2026**", "Date: May 2nd, 2026",
                 "Date: 2 May 2026", "Date: May 2 2026"):
        parsed, kinds, _ = _parse(f"<observations>\n{line}\n* 🔴 (18:00) User plans a trip\n</observations>")
        assert kinds == {"date-format"}, line
        assert parsed.observations.startswith("Date: May 2, 2026\n"), line


def test_example_copied_lines_and_their_date_are_dropped():
    parsed, kinds, outcome = _parse(
        "<observations>\nDate: Dec 4, 2025\n* 🔴 (14:30) User prefers direct answers\n"
        "* 🟡 (14:32) User might prefer dark mode\n* 🔴 (18:00) User plans a trip\n"
        "  * -> ran git status, found 3 modified files\n</observations>")
    assert outcome == "recovered" and kinds == {"example-copied"}
    assert parsed.observations == "* 🔴 (18:00) User plans a trip"


def test_an_answer_that_only_copies_the_example_fails():
    raw = ("<observations>\nDate: Mar 9, 2024\n* 🔴 (21:15) User stated their cat Miso is three, "
           "allergic to chicken, fed twice a day\n</observations>")
    parsed, kinds, outcome = _parse(raw)
    assert outcome == "failed" and kinds == {"example-copied"} and parsed.observations == ""


def test_repeated_lines_with_new_times_are_collapsed():
    loop = "".join(f"* 🟡 (14:{i:02d}) Assistant suggests camping at Vienne\n"
                   f"* 🟡 (14:{i + 1:02d}) User asks how to meet Claire\n" for i in range(0, 20, 2))
    raw = f"<observations>\n* 🔴 (18:00) User plans a trip\n{loop}</observations>"
    assert len(raw) < 2000 and not is_degenerate(raw)
    parsed, kinds, outcome = _parse(raw)
    assert outcome == "recovered" and kinds == {"repeated-lines"}
    assert parsed.observations.split("\n") == [
        "* 🔴 (18:00) User plans a trip", "* 🟡 (14:00) Assistant suggests camping at Vienne",
        "* 🟡 (14:01) User asks how to meet Claire"]


def test_previous_observations_written_again_are_dropped():
    previous = "Date: May 2, 2026\n* 🔴 (18:00) User plans a ten-day trip\n* 🟡 (18:00) Said ok"
    raw = ("<observations>\nDate: May 2, 2026\n* 🔴 (18:03) User plans a ten-day trip\n"
           "* 🟡 (18:03) Said ok\n* 🔴 (18:03) User's sister Claire joins from Orange\n</observations>")
    parsed, outcome = parse_observer_output(raw, previous), parse_outcome(raw, previous)
    assert outcome == "recovered" and parsed.recovered == ("repeated-lines",)
    # short contents may be said twice ("Said ok")
    assert parsed.observations.split("\n")[1:] == [
        "* 🟡 (18:03) Said ok", "* 🔴 (18:03) User's sister Claire joins from Orange"]
    assert parse_outcome(raw) == "clean"  # without the previous observations nothing is wrong
    only_repeats = "<observations>\n* 🔴 (18:03) User plans a ten-day trip\n</observations>"
    assert parse_outcome(only_repeats, previous) == "failed"


def test_long_verbatim_loops_stay_degenerate():
    block = "\n".join(f"* 🔴 (09:0{i}) the user keeps asking about topic number {i}" for i in range(5))
    parsed, kinds, outcome = _parse("<observations>\n" + "\n".join([block] * 20) + "\n</observations>")
    assert parsed.degenerate and outcome == "failed" and kinds == set()


def test_short_repeated_sub_bullets_are_kept():
    raw = "<observations>\n* 🟡 (09:00) Agent ran tests\n" + "  * -> ran pytest\n" * 3 + "</observations>"
    parsed, kinds, outcome = _parse(raw)
    assert outcome == "clean" and parsed.observations.count("ran pytest") == 3


def test_thread_tags_are_removed():
    parsed, kinds, _ = _parse('<observations>\n<thread id="t1">\n* 🔴 (18:00) User plans a trip\n'
                              "</thread>\n</observations>")
    assert kinds == {"thread-tags"} and parsed.observations == "* 🔴 (18:00) User plans a trip"


def test_text_without_any_list_fails():
    _, _, outcome = _parse("I read the conversation. Nothing stood out to me.")
    assert outcome == "failed"


def test_a_prompt_written_after_the_list_is_dropped():
    # seen in v1-demo-02: the model went on to write the next user message of the prompt itself
    parsed, kinds, _ = _parse(
        "<observations>\nDate: May 2, 2026\n* 🔴 (18:00) User plans a trip\n\n---\n\n"
        "These are already recorded.\n\n---\n\n## New Message History to Observe\n\nMay 4 2026:\n"
        "User (7:35 PM): I'm planning a trip from Paris\n- a list line of the invented prompt")
    assert kinds == {"missing-tags", "prose-dropped"}
    assert parsed.observations == "Date: May 2, 2026\n* 🔴 (18:00) User plans a trip"


def test_a_section_cut_by_max_tokens_is_not_prose():
    parsed, kinds, outcome = _parse("<observations>\n* 🔴 (18:00) User plans a trip\n</observations>\n\n"
                                    "<current-task>\nPrimary: trip\n</current-task>\n<suggested-response>\nA ten-day ri")
    assert outcome == "clean" and parsed.current_task == "Primary: trip" and parsed.suggested_response is None


def test_transcript_lines_echoed_in_a_block_are_dropped():
    parsed, kinds, _ = _parse("<observations>\n* 🔴 (18:00) User plans a trip\nUser (6:03 PM): Vienne sounds good\n"
                              "* 🟡 (18:03) User likes Vienne\n</observations>")
    assert kinds == {"prose-dropped"}
    assert parsed.observations == "* 🔴 (18:00) User plans a trip\n* 🟡 (18:03) User likes Vienne"


def test_sections_copied_from_the_example_are_dropped():
    raw = ("<observations>\n* 🔴 (18:03) User's sister Claire joins from Orange\n</observations>\n"
           "<current-task>\nPrimary: choose a chicken-free food for Miso\n</current-task>\n"
           "<suggested-response>\nAsk how Claire travels\n</suggested-response>")
    parsed, kinds, outcome = _parse(raw)
    assert outcome == "recovered" and kinds == {"example-copied"}
    assert parsed.current_task is None and parsed.suggested_response == "Ask how Claire travels"


def test_an_example_line_reworded_is_still_a_copy():
    # seen in v4-reflect-demo: the reflector rewrote the example's cat into the cycling memory
    raw = ("<observations>\nDate: May 2, 2026\n* 🔴 (18:00) User stated their cat Miso is three years old "
           "and allergic to chicken.\n* 🔴 (18:12) User's budget is 745 euros\n</observations>")
    parsed, kinds, _ = _parse(raw)
    assert kinds == {"example-copied"}
    assert parsed.observations == "Date: May 2, 2026\n* 🔴 (18:12) User's budget is 745 euros"
