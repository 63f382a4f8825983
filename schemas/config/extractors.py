"""Extractors (spec §9): values OM extracts during observation or reflection, named by slug."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, field_serializer, field_validator, model_validator

from .base import Options
from .references import Reference, SchemaOption, async_callable_problem, code_name, load_reference

__all__ = [
    "BUILT_IN_SLUGS",
    "RESERVED_SLUGS",
    "WORKING_MEMORY_SLUG",
    "ExtractorConfig",
    "Extractors",
    "slugify",
]

#: Extractors OM adds itself, in the order they run (§9.1).
BUILT_IN_SLUGS = ("current-task", "suggested-response", "thread-title")
WORKING_MEMORY_SLUG = "working-memory"
#: Slugs a user extractor may not take: the built-ins and the XML tags of OM's own formats.
RESERVED_SLUGS = frozenset({
    "observations", "observation", "extracted-values", "thread", "message", "messages",
    "conversation", "history", "system", "user", "assistant", "tool", *BUILT_IN_SLUGS,
})
_FORBIDDEN_PATH_SEGMENTS = frozenset({"__proto__", "constructor", "prototype"})
_SLUG = re.compile(r"^[a-z](?:[a-z0-9-]*[a-z0-9])?$")


def slugify(name: str) -> str:
    """An extractor's slug (§9.1): lowercase; letters and digits kept; quotes and backticks
    dropped; every other run of characters becomes one `-`, never leading or trailing."""
    out: list[str] = []
    gap = False
    for ch in name.lower():
        if ch in "'\"`":
            continue
        if "a" <= ch <= "z" or "0" <= ch <= "9":
            if gap and out:
                out.append("-")
            gap = False
            out.append(ch)
        else:
            gap = True
    return "".join(out)


class ExtractorConfig(Options):
    """A value OM extracts during observation or reflection (§9), kept in thread metadata.

    Without `schema` it is *inline* (a `<slug>` block in the model's answer); with one it is
    *structured* (a follow-up call); `mode = "hook"` only calls `onExtracted`.
    """

    name: str
    """The extractor's name; its slug (lowercase, other characters as `-`: `"User profile"` →
    `user-profile`) names the value's block, event field and metadata key, and must not be
    reserved."""
    instructions: str | Callable[..., Any] | None = None
    """What to extract and when to update it: text, or (from Python) a function of the runtime
    context `{source, threadId, resourceId}`; in a file, a space-free `"module:function"` string
    is such a function's reference.  Required unless `mode = "hook"`."""
    schema_: SchemaOption = Field(default=None, alias="schema")
    """Makes the extractor *structured*: a JSON Schema object, or a `"module:PydanticModel"`
    reference; the value comes from a follow-up model call and is validated against it.
    Unset: *inline*, a `<slug>` block in the model's answer."""
    include_previous_extraction: bool = True
    """Show the value extracted last time to the next run."""
    metadata_key_path: str | Literal[False] | None = None
    """Where the value is kept in the thread's OM metadata: dot-separated names; unset:
    `extracted.<slug>`; `false`: not stored."""
    mode: Literal["hook"] | None = None
    """`"hook"`: extract nothing, only call `onExtracted` with the observations (no instructions
    or schema then)."""
    on_extracted: Reference | Callable[..., Any] | None = None
    """A function (`"module:function"`) called with each extracted value inside the fold; what it
    returns replaces the value, and a raise fails this value alone.  Keep it deterministic, or a
    replay decides differently."""
    retry_structured_extraction_on_empty_object: bool = False
    """Ask a structured extractor's follow-up call once more when it answers an empty object."""

    _code_by_name = field_serializer("instructions", "schema_", "on_extracted")(
        lambda self, value: code_name(value))

    @field_validator("name")
    @classmethod
    def _slug_rules(cls, name: str) -> str:
        slug = slugify(name)
        if not slug:
            raise ValueError(f"{name!r} has no letters or digits to make a slug from; give the "
                             "extractor a name such as 'User profile'")
        if not _SLUG.match(slug):
            raise ValueError(f"{name!r} gives the slug {slug!r}, which must start with a letter; "
                             "rename the extractor so its name starts with a letter")
        if slug in RESERVED_SLUGS:
            raise ValueError(f"{name!r} gives the reserved slug {slug!r} (reserved: "
                             f"{', '.join(sorted(RESERVED_SLUGS))}); choose another name")
        return name

    @field_validator("metadata_key_path")
    @classmethod
    def _key_path(cls, path: str | Literal[False] | None) -> str | Literal[False] | None:
        if not isinstance(path, str):
            return path
        segments = path.split(".")
        if any(not s for s in segments):
            raise ValueError(f"{path!r} has an empty segment; write dot-separated names such as "
                             "'extracted.profile', or false to not store the value")
        bad = _FORBIDDEN_PATH_SEGMENTS.intersection(segments)
        if bad:
            raise ValueError(f"{path!r} uses the forbidden segment {sorted(bad)[0]!r} "
                             "(__proto__, constructor and prototype are refused); rename it")
        return path

    @model_validator(mode="after")
    def _no_async_functions(self) -> ExtractorConfig:
        for name, value in (("instructions", self.instructions), ("schema", self.schema_),
                            ("onExtracted", self.on_extracted)):
            problem = async_callable_problem(value)
            if problem:
                raise ValueError(f"{name}: {code_name(value)} {problem}")
        return self

    @model_validator(mode="after")
    def _mode_rules(self) -> ExtractorConfig:
        if self.mode == "hook":
            if self.on_extracted is None:
                raise ValueError("mode 'hook' needs onExtracted = 'module:function'; add it, or "
                                 "remove mode to extract with instructions")
            if self.instructions is not None or self.schema_ is not None:
                raise ValueError("a mode 'hook' extractor takes no instructions or schema; remove "
                                 "them, or remove mode to extract with instructions")
        elif not callable(self.instructions) and not (self.instructions or "").strip():
            raise ValueError(f"extractor {self.name!r} needs instructions (what to extract and "
                             "when to update it); add instructions = '...'")
        return self

    @property
    def slug(self) -> str:
        return slugify(self.name)

    @property
    def key_path(self) -> str | None:
        """Where the value is stored in the thread's OM metadata; None when not stored."""
        if self.metadata_key_path is False:
            return None
        return self.metadata_key_path or f"extracted.{self.slug}"

    @property
    def kind(self) -> Literal["inline", "structured", "hook"]:
        return "hook" if self.mode == "hook" else "structured" if self.schema_ is not None else "inline"

    def load_schema(self) -> Any:
        """The JSON Schema object, or the imported class a `module:Model` reference names."""
        return load_reference(self.schema_) if isinstance(self.schema_, str) else self.schema_


def _unique_slugs(extractors: tuple[ExtractorConfig, ...]) -> tuple[ExtractorConfig, ...]:
    seen: dict[str, str] = {}
    for extractor in extractors:
        if extractor.slug in seen:
            raise ValueError(f"{seen[extractor.slug]!r} and {extractor.name!r} both give the slug "
                             f"{extractor.slug!r}; rename one of them")
        seen[extractor.slug] = extractor.name
    return extractors


#: An agent's extractors: their slugs must differ, since each names a block and a metadata key.
Extractors = Annotated[tuple[ExtractorConfig, ...], AfterValidator(_unique_slugs)]
