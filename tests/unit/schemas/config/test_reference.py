"""The generated configuration reference: every option and every `[omstream]` key is on the page
with its description, and the page follows the code (a changed docstring is a changed page)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Literal

from pydantic import BaseModel
from pydantic.alias_generators import to_camel
from pydantic.fields import FieldInfo

from omstream.schemas.config import ExtractorConfig, ModelWithRetries, ObservationConfig, OmConfig
from omstream.schemas.config.attribute_docs import attribute_docstrings
from omstream.schemas.config.base import Options
from omstream.schemas.config.reference import (
    NOT_KEYS,
    cell,
    default_cell,
    nested_models,
    option_sections,
    render_reference,
    setting_rows,
    type_label,
    undocumented,
    unwrap,
)
from omstream.settings import ENV_PREFIX, Settings, env_problems

PAGE = render_reference(Settings, env_prefix=ENV_PREFIX)


def every_option(model: type[BaseModel], path: str = "") -> Iterator[tuple[str, type[BaseModel], str, FieldInfo]]:
    """(dotted path, model, field name, field) for every option under `model`, wherever it recurs."""
    for name, info in model.model_fields.items():
        key = info.alias or to_camel(name)
        dotted = f"{path}.{key}" if path else key
        yield dotted, model, name, info
        for child, suffix in nested_models(info.annotation):
            yield from every_option(child, dotted + suffix)


OPTIONS = list(every_option(OmConfig))


def test_the_walk_reaches_the_nested_tables() -> None:
    paths = {path for path, *_ in OPTIONS}
    assert {"enabled", "observation.messageTokens", "observation.extract[].schema", "reflection.extract[].name",
            "model[].maxRetries", "model.upTo", "retrieval.vector", "hooks.onObservationEnd",
            "workingMemory.template", "observation.continuationHints.currentTask"} <= paths
    assert len({(model, name) for _, model, name, _ in OPTIONS}) > 70


def test_every_option_has_a_description() -> None:
    assert [path for path, _, _, info in OPTIONS if not (info.description or "").strip()] == []
    assert undocumented(Settings) == []


def test_every_option_is_on_the_page_with_its_description() -> None:
    by_field: dict[tuple[type[BaseModel], str], list[str]] = {}
    for path, model, name, _ in OPTIONS:
        by_field.setdefault((model, name), []).append(path)
    missing = [paths[0] for paths in by_field.values() if not any(f"| `{p}` |" in PAGE for p in paths)]
    assert missing == []
    for _, model, name, info in OPTIONS:
        assert cell(unwrap(info.description)) in PAGE, (model.__name__, name)


def test_a_table_met_again_points_at_where_it_is_listed() -> None:
    sections = {section.path: section for section in option_sections()}
    assert sections["reflection.extract[]"].same_as == "observation.extract[]"
    assert sections["observation.model[]"].same_as == "model[]"
    assert "The same options as [`observationalMemory.observation.extract[]`]" in PAGE


def test_every_omstream_key_is_on_the_page_with_its_variable_and_description() -> None:
    docs = attribute_docstrings(Settings)
    keys = [f.name for f in fields(Settings) if f.name not in NOT_KEYS]
    assert [row.key for row in setting_rows(Settings)] == keys
    for key in keys:
        assert docs.get(key, "").strip(), key
        assert f"| `{key}` | `OM_{key.upper()}` |" in PAGE
        assert cell(unwrap(docs[key])) in PAGE


def test_the_variables_on_the_page_are_the_ones_the_settings_read() -> None:
    for row in setting_rows(Settings, ENV_PREFIX):
        assert not any("unknown variable" in str(p) for p in env_problems({row.env: "1"})), row.env


def test_a_changed_option_description_changes_the_page() -> None:
    class Observation(ObservationConfig):
        message_tokens: int = 30_000
        """Brand-new words for the observation threshold."""

    class Root(OmConfig):
        observation: Observation = Observation()

    before, after = render_reference(root=OmConfig), render_reference(root=Root)
    assert "Brand-new words" not in before
    assert "| `observation.messageTokens` | integer | `30000` | Brand-new words for the observation threshold. |" in after


def test_a_changed_setting_description_changes_the_page() -> None:
    @dataclass(frozen=True)
    class Changed(Settings):
        partitions: int = 8
        """Brand-new words about partitions."""

    page = render_reference(Changed)
    assert "| `partitions` | `OM_PARTITIONS` | integer | `8` | Brand-new words about partitions. |" in page
    assert "Brand-new words" not in PAGE


def test_an_option_without_a_description_is_reported() -> None:
    class Bare(Options):
        documented: int = 1
        """Has words."""
        bare: int = 2

    assert undocumented(root=Bare) == ["bare"]

    @dataclass(frozen=True)
    class Plain:
        worded: str = ""
        """Has words."""
        silent: str = ""

    assert undocumented(Plain, root=Bare) == ["bare", "omstream.silent"]


def test_only_a_string_right_under_a_field_is_its_docstring() -> None:
    @dataclass
    class Sample:
        a: int = 1
        """About a."""
        b: int = 2
        c: int = 3
        """About c,
        on two lines."""

    assert attribute_docstrings(Sample) == {"a": "About a.", "c": "About c,\non two lines."}


def test_types_and_defaults_read_as_written_in_a_file() -> None:
    assert type_label(int | float | Literal[False], "x") == "number or `false`"
    assert type_label(Literal["thread", "resource"] | None, "x") == '`"thread"` or `"resource"`'
    assert type_label(tuple[ExtractorConfig, ...], "observation.extract") == \
        "list of [table](#option-observation-extract-items)"
    assert type_label(dict[str, str], "x") == "table of string"
    assert default_cell(None) == ("unset", None)
    assert default_cell(False) == ("`false`", None)
    assert default_cell(()) == ("`[]`", None)
    assert default_cell("10m") == ('`"10m"`', None)
    assert default_cell("a\nb") == ("below the table", "a\nb")
    assert default_cell(1, required=True) == ("required", None)
    assert "| `model[].model` | string | required |" in PAGE
    assert ModelWithRetries.model_fields["model"].is_required()
