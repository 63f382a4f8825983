"""The `observationalMemory` options: every §2 rule refused at load with the option and a fix,
the derived numbers of §2.1, durations and model routing.  Extractors and references are in
test_config_extractors.py, `om config check` in test_config_check.py."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from omstream.engine.rules.resolution import resolve
from omstream.engine.rules.thresholds import (
    resolve_activation_ratio,
    resolve_block_after,
    resolve_buffer_tokens,
    resolve_retention_floor,
)
from omstream.schemas.config import (
    DEFAULT_MODEL,
    ContinuationHints,
    ModelByInputTokens,
    OmConfig,
    OmConfigError,
    check_om_config,
    load_om_config,
    model_name,
    model_supports_temperature,
)
from omstream.schemas.durations import parse_activate_after_idle, parse_duration_ms

MIN = 60_000
HOUR = 60 * MIN


def error_text(options) -> str:
    with pytest.raises(OmConfigError) as caught:
        load_om_config(options)
    return str(caught.value)


# --- one case per rule: (options, option path named, fix hint) ---------------------------------
RULES = {
    "top-level model with observation.model": (
        {"model": "openai/gpt-5-mini", "observation": {"model": "openai/gpt-4o"}},
        "model", "remove it and set the per-agent models"),
    "top-level model with reflection.model": (
        {"model": "default", "reflection": {"model": "openai/gpt-4o"}},
        "model", "set the top-level model for both agents"),
    "shareTokenBudget with buffering on": (
        {"shareTokenBudget": True}, "shareTokenBudget", "set observation.bufferTokens = false"),
    "bufferTokens zero": (
        {"observation": {"bufferTokens": 0}}, "observation.bufferTokens",
        "false to turn async buffering off"),
    "bufferTokens negative": (
        {"observation": {"bufferTokens": -0.2}}, "observation.bufferTokens", "such as 0.2"),
    "bufferTokens true": (
        {"observation": {"bufferTokens": True}}, "observation.bufferTokens", "such as 0.2"),
    "bufferTokens not below messageTokens": (
        {"observation": {"bufferTokens": 30_000}}, "observation.bufferTokens", "such as 5000"),
    "bufferTokens above a custom messageTokens": (
        {"observation": {"messageTokens": 4000, "bufferTokens": 5000}}, "observation.bufferTokens",
        "below observation.messageTokens (4000)"),
    "bufferActivation zero": (
        {"observation": {"bufferActivation": 0}}, "observation.bufferActivation", "such as 0.8"),
    "bufferActivation in the gap (1, 1000)": (
        {"observation": {"bufferActivation": 1.5}}, "observation.bufferActivation", ">= 1000 to keep"),
    "bufferActivation 999": (
        {"observation": {"bufferActivation": 999}}, "observation.bufferActivation", ">= 1000"),
    "absolute bufferActivation not below messageTokens": (
        {"observation": {"bufferActivation": 30_000}}, "observation.bufferActivation",
        "use a ratio in (0, 1] such as 0.8"),
    "blockAfter below 1": (
        {"observation": {"blockAfter": 0.9}}, "observation.blockAfter", "such as 1.2"),
    "absolute blockAfter below messageTokens": (
        {"observation": {"blockAfter": 20_000}}, "observation.blockAfter", "absolute count above 30000"),
    "absolute blockAfter equal to messageTokens": (
        {"observation": {"blockAfter": 30_000}}, "observation.blockAfter", "must be greater than"),
    "blockAfter without buffering": (
        {"observation": {"bufferTokens": False, "blockAfter": 1.5}}, "observation.blockAfter",
        "remove blockAfter"),
    "reflection.bufferActivation above 1": (
        {"reflection": {"bufferActivation": 1.5}}, "reflection.bufferActivation", "such as 0.5"),
    "reflection.bufferActivation zero": (
        {"reflection": {"bufferActivation": 0}}, "reflection.bufferActivation", "such as 0.5"),
    "reflection.blockAfter below observationTokens": (
        {"reflection": {"blockAfter": 30_000}}, "reflection.blockAfter", "absolute count above 40000"),
    "reflection.blockAfter equal to observationTokens": (
        {"reflection": {"blockAfter": 40_000}}, "reflection.blockAfter", "must be greater than"),
    "reflection.blockAfter below 1": (
        {"reflection": {"blockAfter": 0.5}}, "reflection.blockAfter", "such as 1.2"),
    "reflection.blockAfter without buffering": (
        {"observation": {"bufferTokens": False}, "reflection": {"blockAfter": 1.5}},
        "reflection.blockAfter", "remove reflection.blockAfter"),
    "resource scope with bufferTokens": (
        {"scope": "resource", "observation": {"bufferTokens": 0.2}}, "observation.bufferTokens",
        "Remove it, or use scope: 'thread'"),
    "resource scope with observation.bufferActivation": (
        {"scope": "resource", "observation": {"bufferActivation": 0.5}},
        "observation.bufferActivation", "not supported with scope: 'resource'"),
    "resource scope with reflection.bufferActivation": (
        {"scope": "resource", "reflection": {"bufferActivation": 0.5}},
        "reflection.bufferActivation", "use scope: 'thread'"),
    "resource scope with bufferOnIdle": (
        {"scope": "resource", "observation": {"bufferOnIdle": True}},
        "observation.bufferOnIdle", "async buffering"),
    "messageTokens zero": (
        {"observation": {"messageTokens": 0}}, "observation.messageTokens", "use e.g. 30000"),
    "messageTokens fractional": (
        {"observation": {"messageTokens": 1.5}}, "observation.messageTokens", "use e.g. 30000"),
    "messageTokens a string": (
        {"observation": {"messageTokens": "lots"}}, "observation.messageTokens", "use e.g. 30000"),
    "observationTokens negative": (
        {"reflection": {"observationTokens": -1}}, "reflection.observationTokens", "use e.g. 40000"),
    "maxTokensPerBatch zero": (
        {"observation": {"maxTokensPerBatch": 0}}, "observation.maxTokensPerBatch", "use e.g. 10000"),
    "previousObserverTokens negative": (
        {"observation": {"previousObserverTokens": -1}}, "observation.previousObserverTokens",
        "false for no limit"),
    "previousObserverTokens true": (
        {"observation": {"previousObserverTokens": True}}, "observation.previousObserverTokens",
        "0 to leave previous observations out"),
    "activateAfterIdle negative": (
        {"activateAfterIdle": -5}, "activateAfterIdle", "a duration such as '5m'"),
    "activateAfterIdle NaN": (
        {"activateAfterIdle": float("nan")}, "activateAfterIdle", "'auto', or false"),
    "activateAfterIdle garbage": (
        {"activateAfterIdle": "soon"}, "activateAfterIdle", "a duration such as '5m'"),
    "activateAfterIdle true": (
        {"activateAfterIdle": True}, "activateAfterIdle", "use milliseconds"),
    "observation.activateAfterIdle bad unit": (
        {"observation": {"activateAfterIdle": "5 days"}}, "observation.activateAfterIdle", "'1hr'"),
    "reflection.activateAfterIdle negative": (
        {"reflection": {"activateAfterIdle": -1}}, "reflection.activateAfterIdle", "'auto'"),
    "ModelByInputTokens key not a number": (
        {"model": {"upTo": {"lots": "a/b"}}}, "model.upTo", "threshold keys must be positive numbers"),
    "ModelByInputTokens key zero": (
        {"observation": {"model": {"upTo": {"0": "a/b"}}}}, "observation.model.upTo", 'upTo = {"10000"'),
    "ModelByInputTokens key infinite": (
        {"model": {"upTo": {"inf": "a/b"}}}, "model.upTo", "Got: inf"),
    "ModelByInputTokens empty": (
        {"model": {"upTo": {}}}, "model.upTo", "needs at least one token limit"),
    "ModelWithRetries empty list": (
        {"model": []}, "model", "list at least one {model = '...'} entry"),
    "ModelWithRetries all disabled": (
        {"model": [{"model": "a/b", "enabled": False}]}, "model", "set enabled = true"),
    "ModelWithRetries negative retries": (
        {"reflection": {"model": [{"model": "a/b", "maxRetries": -1}]}},
        "reflection.model[0].maxRetries", "maxRetries = 2"),
    "model of the wrong kind": (
        {"model": 7}, "model", "a model is a name such as 'openai/gpt-5-mini'"),
    "empty model name": (
        {"model": "  "}, "model", "use e.g. 'openai/gpt-5-mini'"),
    "extractor slug must start with a letter": (
        {"observation": {"extract": [{"name": "2nd pass", "instructions": "x"}]}},
        "observation.extract[0].name", "starts with a letter"),
    "extractor slug empty": (
        {"observation": {"extract": [{"name": "!!!", "instructions": "x"}]}},
        "observation.extract[0].name", "give the extractor a name"),
    "extractor reserved slug": (
        {"reflection": {"extract": [{"name": "Current Task", "instructions": "x"}]}},
        "reflection.extract[0].name", "choose another name"),
    "extractor duplicate slug": (
        {"observation": {"extract": [{"name": "User profile", "instructions": "x"},
                                     {"name": "user_profile", "instructions": "y"}]}},
        "observation.extract", "rename one of them"),
    "extractor metadataKeyPath __proto__": (
        {"observation": {"extract": [{"name": "Topic", "instructions": "x",
                                      "metadataKeyPath": "extracted.__proto__.x"}]}},
        "observation.extract[0].metadataKeyPath", "rename it"),
    "extractor metadataKeyPath constructor": (
        {"observation": {"extract": [{"name": "Topic", "instructions": "x",
                                      "metadataKeyPath": "constructor"}]}},
        "metadataKeyPath", "rename it"),
    "extractor metadataKeyPath empty segment": (
        {"observation": {"extract": [{"name": "Topic", "instructions": "x", "metadataKeyPath": "a..b"}]}},
        "metadataKeyPath", "or false to not store the value"),
    "extractor without instructions": (
        {"observation": {"extract": [{"name": "Topic"}]}}, "observation.extract[0]", "add instructions"),
    "hook extractor without onExtracted": (
        {"observation": {"extract": [{"name": "Topic", "mode": "hook"}]}}, "observation.extract[0]",
        "needs onExtracted"),
    "hook extractor with a schema": (
        {"observation": {"extract": [{"name": "Topic", "mode": "hook", "onExtracted": "app.hooks:topic",
                                      "schema": {"type": "object"}}]}},
        "observation.extract[0]", "remove them"),
    "extractor schema of an unknown type": (
        {"observation": {"extract": [{"name": "Topic", "instructions": "x", "schema": {"type": "thing"}}]}},
        "observation.extract[0].schema", "use one of"),
    "extractor schema reference malformed": (
        {"observation": {"extract": [{"name": "Topic", "instructions": "x", "schema": "not a ref"}]}},
        "observation.extract[0].schema", "'package.module:function'"),
    "hook reference malformed": (
        {"hooks": {"onObservationEnd": "app.hooks.on_end"}}, "hooks.onObservationEnd",
        "module path, a colon, then the name"),
    "working memory slug taken": (
        {"observation": {"manageWorkingMemory": True,
                         "extract": [{"name": "Working memory", "instructions": "x"}]}},
        "observation.extract", "turn manageWorkingMemory off"),
    "unknown option": (
        {"observation": {"messsageTokens": 5}}, "observation.messsageTokens", "did you mean 'messageTokens'"),
    "hookExecution value": (
        {"hookExecution": "later"}, "hookExecution", "'non-blocking' or 'await'"),
    "scope value": ({"scope": "global"}, "scope", "'thread' or 'resource'"),
    "tokenCounter unknown": ({"tokenCounter": "words"}, "tokenCounter", "use 'tiktoken'"),
    "timeZone unknown": ({"timeZone": "Mars/Olympus"}, "timeZone", "'Europe/Berlin'"),
    "observeAttachments bare pattern": (
        {"observation": {"observeAttachments": "image/*"}}, "observation.observeAttachments",
        "a list of mime patterns"),
    "observeAttachments bad pattern": (
        {"observation": {"observeAttachments": ["images"]}}, "observation.observeAttachments", "'image/*'"),
    "modelSettings temperature negative": (
        {"observation": {"modelSettings": {"temperature": -1}}}, "observation.modelSettings",
        "temperature = 0.3"),
    "modelSettings maxOutputTokens zero": (
        {"reflection": {"modelSettings": {"maxOutputTokens": 0}}}, "reflection.modelSettings",
        "maxOutputTokens = 100000"),
    "providerOptions not per provider": (
        {"observation": {"providerOptions": {"thinkingBudget": 1}}}, "observation.providerOptions",
        "thinkingConfig"),
    "options not an object": (7, "observationalMemory", "use true, false, or an object"),
}


@pytest.mark.parametrize(("options", "option", "fix"), RULES.values(), ids=RULES.keys())
def test_rule_is_refused_naming_the_option_and_the_fix(options, option, fix):
    text = error_text(options)
    assert option in text
    assert fix in text


def test_every_problem_is_reported_not_only_the_first():
    problems = check_om_config({"observation": {"messageTokens": -1, "bufferActivation": 5},
                                "reflection": {"bufferActivation": 2}, "timeZone": "Nowhere/None"})
    assert [p.path for p in problems] == [
        "observation.messageTokens", "observation.bufferActivation", "reflection.bufferActivation",
        "timeZone"]


def test_cross_option_rules_are_all_reported():
    problems = check_om_config({"model": "a/b", "observation": {"model": "c/d", "bufferTokens": 40_000,
                                                               "blockAfter": 100}})
    assert [p.path for p in problems] == ["model", "observation.bufferTokens", "observation.blockAfter"]


def test_error_is_a_value_error_listing_problems():
    with pytest.raises(ValueError, match=r"observation\.blockAfter: 0\.5 is below 1"):
        load_om_config({"observation": {"blockAfter": 0.5}})


# --- what is accepted ---------------------------------------------------------------------------
def test_snake_case_and_camel_case_are_the_same_option():
    camel = load_om_config({"observation": {"messageTokens": 8000, "bufferTokens": False,
                                            "previousObserverTokens": False},
                            "reflection": {"observationTokens": 9000}, "shareTokenBudget": True})
    snake = load_om_config({"observation": {"message_tokens": 8000, "buffer_tokens": False,
                                            "previous_observer_tokens": False},
                            "reflection": {"observation_tokens": 9000}, "share_token_budget": True})
    assert camel == snake
    assert resolve(snake).total_budget == 17_000
    assert resolve(snake).observation.previous_observer_tokens is None


def test_true_false_none_and_wrappers():
    assert load_om_config(True).model == DEFAULT_MODEL and load_om_config(True).enabled
    assert load_om_config(False).enabled is False
    assert load_om_config(None) == OmConfig() == load_om_config({})
    wrapped = load_om_config({"observationalMemory": {"scope": "resource"}})
    assert wrapped.scope == "resource"
    assert load_om_config({"observational_memory": False}).enabled is False
    assert load_om_config({"omstream": {"namespace": "x"}}) == OmConfig()
    assert load_om_config({"omstream": {}, "observationalMemory": True}).model == DEFAULT_MODEL
    assert load_om_config({"enabled": False}).enabled is False


def test_every_documented_option_is_validated():
    om = load_om_config(value={
        "enabled": True, "scope": "thread", "activateAfterIdle": "5m", "activateOnProviderChange": True,
        "shareTokenBudget": False, "temporalMarkers": True,
        "retrieval": {"vector": True, "scope": "thread", "instructions": "look it up"},
        "hooks": {"onObservationStart": "app.hooks:start", "onObservationEnd": "app.hooks:end",
                  "onReflectionStart": "app.hooks:rstart", "onReflectionEnd": "app.hooks:rend"},
        "hookExecution": "await", "obscureThreadIds": True, "tokenCounter": "tokenx",
        "timeZone": "Europe/Lisbon",
        "observation": {
            "model": "openai/gpt-5-mini", "instruction": "focus on dates", "threadTitle": True,
            "extract": [{"name": "User profile", "instructions": "stable facts",
                         "schema": {"type": "object", "properties": {"name": {"type": "string"}}},
                         "includePreviousExtraction": False, "metadataKeyPath": "profile.user"},
                        {"name": "Mood", "mode": "hook", "onExtracted": "app.hooks:mood"}],
            "manageWorkingMemory": True, "observeAttachments": ["image/*", "application/pdf"],
            "messageTokens": 20_000, "maxTokensPerBatch": 5000,
            "modelSettings": {"temperature": 0.1, "maxOutputTokens": 8000, "userWords": 3},
            "providerOptions": {"openai": {"reasoningEffort": "low"}},
            "bufferTokens": 4000, "bufferOnIdle": True, "bufferActivation": 5000,
            "activateAfterIdle": False, "activateOnProviderChange": False, "blockAfter": 30_000,
            "previousObserverTokens": 0,
            "continuationHints": {"currentTask": True, "suggestedResponse": False},
        },
        "reflection": {
            "model": "anthropic/claude-sonnet-4-5", "instruction": "keep names",
            "extract": [{"name": "Topics", "instructions": "main topics"}],
            "observationTokens": 50_000, "modelSettings": {"temperature": 0.2}, "providerOptions": {},
            "bufferActivation": 0.4, "activateAfterIdle": "1hr", "activateOnProviderChange": True,
            "blockAfter": 1.5, "continuationHints": False,
        },
    })
    r = resolve(om)
    assert r.retrieval.scope == "thread" and r.hook_execution == "await" and r.obscure_thread_ids
    assert r.hooks["onReflectionEnd"] == "app.hooks:rend"
    o = r.observation
    assert (o.buffer_tokens, o.retention_floor, o.block_after) == (4000, 5000, 30_000)
    assert o.activation_ratio == 0.75 and o.buffer_ramp_point == 15_600
    assert o.activate_after_idle is None and o.activate_on_provider_change is False
    assert o.extractors == ("current-task", "thread-title", "user-profile", "mood", "working-memory")
    assert o.model.settings == {"temperature": 0.1, "maxOutputTokens": 8000, "userWords": 3}
    assert o.model.provider_options == {"openai": {"reasoningEffort": "low"}}
    assert o.observe_attachments == ("image/*", "application/pdf")
    assert om.observation.extract[0].key_path == "profile.user"
    assert om.observation.extract[0].kind == "structured" and om.observation.extract[1].kind == "hook"
    f = r.reflection
    assert (f.buffer_start, f.block_after) == (20_000, 75_000)
    assert f.activate_after_idle == HOUR and f.activate_on_provider_change
    assert f.extractors == ("topics",)
    assert f.model.provider_options == {}
    assert f.model.settings == {"temperature": 0.2}


def test_the_json_schema_of_the_tree_can_be_generated():
    schema = OmConfig.model_json_schema(by_alias=True)
    assert {"observation", "reflection", "shareTokenBudget", "activateAfterIdle"} <= set(schema["properties"])


# --- derived numbers -----------------------------------------------------------------------------
def test_defaults_resolve_to_the_numbers_of_section_2_1():
    r = resolve(load_om_config(True))
    o, f = r.observation, r.reflection
    assert r.async_buffering and r.total_budget is None
    assert o.message_tokens == 30_000 and o.buffer_tokens == 6000
    assert o.buffer_ramp_point == 23_400 and o.min_buffer_tokens == 3000
    assert o.retention_floor == 6000 and o.activation_ratio == 0.8
    assert o.block_after == 36_000
    assert f.observation_tokens == 40_000 and f.buffer_start == 20_000 and f.block_after == 48_000
    assert o.previous_observer_tokens == 2000 and o.max_tokens_per_batch == 10_000
    assert o.observe_attachments is True
    assert o.extractors == ("current-task", "suggested-response")


def test_shared_budget_with_buffering_off():
    r = resolve(load_om_config({"shareTokenBudget": True, "observation": {"bufferTokens": False}}))
    assert r.total_budget == 70_000 and r.observation.max_threshold == 70_000
    assert r.async_buffering is False


@pytest.mark.parametrize("options", [
    {"observation": {"bufferTokens": False}},
    {"scope": "resource"},
    {"scope": "resource", "observation": {"bufferTokens": False}},
])
def test_buffering_off_leaves_every_buffer_number_unset(options):
    om = load_om_config(options)
    r = resolve(om)
    assert om.async_buffering is False and r.async_buffering is False
    o, f = r.observation, r.reflection
    numbers = (o.buffer_tokens, o.buffer_activation, o.block_after, o.retention_floor, o.buffer_ramp_point)
    assert numbers == (None,) * 5
    assert (f.buffer_activation, f.block_after, f.buffer_start) == (None, None, None)


def test_resource_scope_obscures_thread_ids_by_default():
    assert resolve(load_om_config({"scope": "resource"})).obscure_thread_ids
    assert resolve(load_om_config({})).obscure_thread_ids is False
    explicit = load_om_config({"scope": "resource", "obscureThreadIds": False})
    assert resolve(explicit).obscure_thread_ids is False


def test_thresholds_like_the_originals_tests():
    assert resolve_buffer_tokens(0.25, 20_000) == 5000
    assert resolve_buffer_tokens(5000, 30_000) == 5000 and resolve_buffer_tokens(1, 30_000) == 1
    assert resolve_buffer_tokens(0.01, 100_000) == 1000 and resolve_buffer_tokens(False, 1) is None
    assert resolve_block_after(1.5, 20_000) == 30_000 and resolve_block_after(1.0, 20_000) == 20_000
    assert resolve_block_after(50_000, 1) == 50_000 and resolve_block_after(100, 1) == 100
    assert resolve_block_after(1.3, 33_333) == 43_333 and resolve_block_after(None, 1) is None
    assert resolve_retention_floor(0.7, 30_000) == 9000 and resolve_retention_floor(5000, 30_000) == 5000
    assert resolve_retention_floor(1000, 30_000) == 1000 and resolve_retention_floor(1.0, 30_000) == 0
    assert resolve_retention_floor(0, 30_000) == 30_000 and resolve_retention_floor(-0.5, 30_000) == 30_000
    assert resolve_retention_floor(1.5, 30_000) == 0 and resolve_retention_floor(0.8, 30_000) == 6000
    assert resolve_activation_ratio(0.7, 30_000) == 0.7
    assert resolve_activation_ratio(5000, 30_000) == pytest.approx(0.8333, abs=1e-4)
    assert resolve_activation_ratio(50_000, 30_000) == 0 and resolve_activation_ratio(30_000, 30_000) == 0
    assert resolve_activation_ratio(-0.5, 1) == 0 and resolve_activation_ratio(1.5, 1) == 1



# The load-time rules read bufferTokens and blockAfter without the engine (the schemas never import
# it); they must accept exactly the options whose engine numbers fit below the threshold, and an
# absolute blockAfter only above it (a multiplier of 1 blocks at the threshold, as documented).
@settings(max_examples=300, deadline=None)
@given(message_tokens=st.integers(1, 200_000),
       buffer_tokens=st.one_of(st.floats(0.0001, 0.9999), st.integers(1, 250_000),
                               st.floats(1, 250_000, allow_infinity=False)),
       block_after=st.one_of(st.none(), st.floats(1, 99.99), st.integers(100, 300_000),
                             st.floats(100, 300_000, allow_infinity=False)))
@example(message_tokens=2, buffer_tokens=0.25, block_after=None)  # 0.5 tokens: rounds half up to 1
@example(message_tokens=30_000, buffer_tokens=0.2, block_after=29_999.9999996)  # tidied to 30 000: refused
@example(message_tokens=30_000, buffer_tokens=0.2, block_after=1.0)  # a multiplier of 1: accepted
def test_the_buffer_rules_agree_with_the_engines_numbers(message_tokens, buffer_tokens, block_after):
    observation = {"messageTokens": message_tokens, "bufferTokens": buffer_tokens, "blockAfter": block_after}
    paths = {p.path for p in check_om_config({"observation": observation})}
    size = resolve_buffer_tokens(buffer_tokens, message_tokens)
    assert ("observation.bufferTokens" in paths) == (not 1 <= size < message_tokens)
    limit = resolve_block_after(block_after, message_tokens)
    absolute = block_after is not None and block_after >= 100
    assert ("observation.blockAfter" in paths) == (absolute and limit <= message_tokens)


# --- models -------------------------------------------------------------------------------------
def test_model_resolution_order():
    assert load_om_config({}).observer_model == DEFAULT_MODEL
    only_reflection = load_om_config({"reflection": {"model": "openai/gpt-4o"}})
    assert only_reflection.observer_model == "openai/gpt-4o" == only_reflection.reflector_model
    both = load_om_config({"observation": {"model": "a/obs"}, "reflection": {"model": "a/ref"}})
    assert (both.observer_model, both.reflector_model) == ("a/obs", "a/ref")
    assert load_om_config({"model": "default"}).reflector_model == DEFAULT_MODEL


def test_max_output_tokens_only_for_the_default_choice_and_the_true_quirk():
    def settings(options):
        r = resolve(load_om_config(options))
        return r.observation.model.settings, r.reflection.model.settings

    assert settings({}) == ({"temperature": 0.3, "maxOutputTokens": 100_000},
                            {"temperature": 0, "maxOutputTokens": 100_000})
    assert settings({"model": "default"})[0]["maxOutputTokens"] == 100_000
    assert settings(True) == ({"temperature": 0.3}, {"temperature": 0})       # true ≡ {model: default name}
    assert settings({"model": "openai/gpt-5-mini"}) == ({}, {})               # no temperature, no max
    assert settings({"model": {"upTo": {"1000": "openai/o3", "9000": "a/b"}}}) == (
        {"maxOutputTokens": 100_000}, {"maxOutputTokens": 100_000})
    assert settings({"observation": {"model": "a/b", "modelSettings": {"max_output_tokens": 10}}})[0] == {
        "temperature": 0.3, "maxOutputTokens": 10}


def test_provider_options_default_and_wholesale_replacement():
    r = resolve(load_om_config({}))
    assert r.observation.model.provider_options == {"google": {"thinkingConfig": {"thinkingBudget": 215}}}
    assert r.reflection.model.provider_options == {"google": {"thinkingConfig": {"thinkingBudget": 1024}}}
    mine = resolve(load_om_config({"observation": {"providerOptions": {"google": {"x": 1}}}}))
    assert mine.observation.model.provider_options == {"google": {"x": 1}}


@pytest.mark.parametrize(("model", "supported"), [
    ("google/gemini-2.5-flash", True), ("openai/gpt-4o", True), ("anthropic/claude-sonnet-4-5", True),
    ("openai/gpt-5-mini", False), ("gpt-5", False), ("openai/o3", False), ("o1-mini", False),
    ("openai/o4-mini", False), ("openai/gpt-5-chat-latest", True), ("deepseek/deepseek-reasoner", False),
    ("openai/omni-moderation", True),
])
def test_model_supports_temperature(model, supported):
    assert model_supports_temperature(model) is supported


def test_model_by_input_tokens_routes_and_overflows():
    router = ModelByInputTokens.model_validate(
        {"upTo": {"40000": "b/big", "10000": "a/small", 1e6: "c/huge"}})
    assert router.thresholds() == (10_000, 40_000, 1_000_000)
    assert router.resolve(0) == "a/small" and router.resolve(10_000) == "a/small"
    assert router.resolve(10_001) == "b/big" and router.resolve(1_000_000) == "c/huge"
    with pytest.raises(ValueError, match=r"input token count \(1000001\) exceeds the largest configured "
                                         r"threshold \(1000000\)\. Please configure a higher threshold"):
        router.resolve(1_000_001)
    om = load_om_config({"model": {"up_to": {"10000": "a/small", "40000": "b/big"}}})
    assert om.observer_model == "a/small"
    resolved = resolve(om).observation.model
    assert resolved.routing == "by-input-tokens" and resolved.for_input_tokens(20_000) == "b/big"


def test_model_with_retries_list():
    om = load_om_config({"observation": {"model": [
        {"id": "primary", "model": "openai/gpt-4o", "maxRetries": 2, "headers": {"x-team": "om"}},
        {"model": "default", "enabled": False}]}})
    spec = om.observation.model
    assert spec[0].max_retries == 2 and spec[1].enabled is False
    assert om.observer_model == "openai/gpt-4o" == model_name(spec)
    assert resolve(om).observation.model.routing == "fallbacks"
    assert model_name([*spec][1:]) == DEFAULT_MODEL


def test_continuation_hints_object():
    om = load_om_config({"observation": {"continuationHints": {"suggestedResponse": False}}})
    assert isinstance(om.observation.continuation_hints, ContinuationHints)
    assert bool(om.observation.continuation_hints)
    assert not ContinuationHints(current_task=False, suggested_response=False)
    assert resolve(om).observation.extractors == ("current-task",)


# --- durations ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("value", "ms"), [
    ("5m", 5 * MIN), ("1hr", HOUR), ("90s", 90_000), ("250ms", 250), ("1.5 hours", 90 * MIN),
    ("2 MINUTES", 2 * MIN), ("10Sec", 10_000), (" 3h ", 3 * HOUR), ("0.5s", 500),
])
def test_duration_strings(value, ms):
    assert parse_duration_ms(value) == ms
    assert parse_activate_after_idle(value) == ms


@pytest.mark.parametrize(("value", "result"), [
    (300_000, 300_000), (0, 0), (1.5, 1.5), ("auto", "auto"), ("AUTO", "auto"), (False, None), (None, None),
])
def test_idle_values(value, result):
    assert parse_activate_after_idle(value) == result


@pytest.mark.parametrize("value", ["-5m", "5", "5 days", "m", "five minutes", "", "5m ago", -1,
                                   float("nan"), float("inf"), True, [5]])
def test_bad_idle_values(value):
    with pytest.raises(ValueError, match="'5m'"):
        parse_activate_after_idle(value)


def test_idle_activation_inheritance():
    om = load_om_config({"activateAfterIdle": "5m", "activateOnProviderChange": True})
    r = resolve(om)
    assert r.observation.activate_after_idle == 5 * MIN and r.observation.activate_on_provider_change
    assert r.reflection.activate_after_idle is None and not r.reflection.activate_on_provider_change
    off = load_om_config({"activateAfterIdle": "auto", "observation": {"activateAfterIdle": False}})
    assert resolve(off).observation.activate_after_idle is None
    assert resolve(load_om_config({"activateAfterIdle": "auto"})).observation.activate_after_idle == "auto"
    zero = load_om_config({"activateAfterIdle": 0})          # 0 ms is "at once", not false
    assert zero.activate_after_idle is not False and resolve(zero).observation.activate_after_idle == 0


def test_every_option_of_a_model_list_entry_is_accepted():
    entry = {"model": "a/b", "id": "primary", "maxRetries": 1, "modelSettings": {"temperature": 0.1},
             "providerOptions": {"openai": {"reasoningEffort": "low"}}, "headers": {"x-route": "eu"}}
    assert check_om_config({"observation": {"model": [entry, {"model": "c/d", "enabled": False}]}}) == ()


@pytest.mark.parametrize("options", [
    {"scope": "resource"},
    {"scope": "resource", "obscureThreadIds": True, "observation": {"maxTokensPerBatch": 5000}},
    {"scope": "resource", "observation": {"manageWorkingMemory": True, "extract": [
        {"name": "mood", "instructions": "the user's mood"}]},
     "reflection": {"extract": [{"name": "mood", "instructions": "the user's mood"}]}},
    {"scope": "resource", "obscureThreadIds": False, "observation": {"bufferTokens": False}},
    {"scope": "resource", "temporalMarkers": True, "observation": {"threadTitle": True}},
    {"scope": "resource", "retrieval": True},
    {"scope": "resource", "retrieval": {"scope": "thread", "instructions": "cite the ids"}},
    {"obscureThreadIds": True, "observation": {"maxTokensPerBatch": 5000}},
])
def test_resource_scope_and_its_options_are_accepted(options):
    assert check_om_config(options) == ()
