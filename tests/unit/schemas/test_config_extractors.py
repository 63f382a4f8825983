"""Extractors and references in the options: slugs, defaults, hooks loaded on demand, and the
functions that run inside the fold (an async one is refused at load, with the reason)."""

from __future__ import annotations

import asyncio
import json

import pytest

from omstream.schemas.config import load_om_config, load_reference, slugify


# --- extractors and references --------------------------------------------------------------------
@pytest.mark.parametrize(("name", "slug"), [
    ("User profile", "user-profile"), ("  User   Profile!! ", "user-profile"), ("user's mood", "users-mood"),
    ('the "best" `one`', "the-best-one"), ("Task -- list", "task-list"), ("ÜberTopic", "bertopic"),
    ("a", "a"), ("v2 notes", "v2-notes"), ("2nd", "2nd"), ("!!!", ""), ("Working Memory", "working-memory"),
])
def test_slugify(name, slug):
    assert slugify(name) == slug


def test_extractor_defaults():
    om = load_om_config({"reflection": {"extract": [
        {"name": "Open questions", "instructions": "list them"},
        {"name": "Plan", "instructions": "x", "metadataKeyPath": False, "schema": "pydantic:BaseModel"}]}})
    first, second = om.reflection.extract
    assert first.slug == "open-questions" and first.key_path == "extracted.open-questions"
    assert first.include_previous_extraction and first.kind == "inline"
    assert second.key_path is None and second.kind == "structured"
    assert second.load_schema().__name__ == "BaseModel"


def test_hooks_are_references_loaded_on_demand():
    hooks = {"onObservationStart": "json:dumps", "onReflectionEnd": "no_such_module_x:f"}
    om = load_om_config({"hooks": hooks})
    assert om.hooks.references() == hooks
    with pytest.raises(ValueError, match="cannot import 'no_such_module_x'"):
        om.hooks.load()
    assert load_reference("json:dumps") is json.dumps
    with pytest.raises(ValueError, match="check the name after the colon"):
        load_reference("json:nope")
    with pytest.raises(ValueError, match="is not a function"):
        load_om_config({"hooks": {"onObservationEnd": "json:__name__"}}).hooks.load()


# --- extractor functions run inside the fold: an async one is refused at load -------------------
async def async_on_extracted(context):
    return context["current"]


class AsyncCallable:
    async def __call__(self, context):
        return context["current"]


def plain_on_extracted(context):
    return context["current"]


@pytest.mark.parametrize("function", [async_on_extracted, AsyncCallable()])
def test_an_async_extractor_function_given_from_python_is_refused_with_the_reason(function):
    with pytest.raises(ValueError, match="onExtracted: .* is an async function; .* make it a plain `def`"):
        load_om_config({"observation": {"extract": [{"name": "Mood", "instructions": "the mood",
                                                     "onExtracted": function}]}})
    with pytest.raises(ValueError, match="instructions: .* is an async function"):
        load_om_config({"observation": {"extract": [{"name": "Mood", "instructions": function}]}})
    load_om_config({"observation": {"extract": [{"name": "Mood", "instructions": "the mood",
                                                 "onExtracted": plain_on_extracted}]}})


def test_an_async_extractor_reference_stops_the_simulator_before_any_fold():
    # Named in a file, the function is only imported by the process that runs the fold: the worker
    # at start, `om replay`, and the simulator, which crashed with a TypeError in the fold before.
    from omstream.conversations.simulation import simulate
    from omstream.engine.rules.extraction import import_references

    om = load_om_config({"observation": {"extract": [{"name": "Mood", "instructions": "the mood",
                         "onExtracted": f"{__name__}:async_on_extracted"}]}})
    with pytest.raises(ValueError, match=r"observation.extract\[0\].onExtracted: .* is an async function"):
        import_references(om)
    with pytest.raises(ValueError, match="is an async function"):
        asyncio.run(simulate([], om))
    import_references(load_om_config({"observation": {"extract": [{
        "name": "Mood", "instructions": "the mood", "onExtracted": f"{__name__}:plain_on_extracted"}]}}))
