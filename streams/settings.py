"""Runtime settings: one file (TOML, YAML or JSON) plus `OM_*` environment variables.

A file holds two tables, read by the worker, the web server and the CLI alike::

    [omstream]                 # where things run
    namespace = "om"           # prefix of every topic, consumer group and table
    version = "live"           # the memory version this process folds or serves
    bootstrap = "127.0.0.1:9092"
    partitions = 4

    [observationalMemory]      # what the memory does (schemas.config.OmConfig)
    observation = { model = "scripted/observer", messageTokens = 3000, bufferTokens = false }

Environment variables override the file: `OM_NAMESPACE`, `OM_BOOTSTRAP`, `OM_PARTITIONS`,
`OM_DATA_DIR`, `OM_WEB_HOST`, `OM_WEB_PORT`, `OM_BROKER_PORT`, `OM_CONTROLLER_PORT`,
`OM_MODEL_RETRIES`, `OM_RETRY_BASE_MS`, `OM_MODEL_CONCURRENCY`, `OM_MODEL_LIMITS`, `OM_RESULT_KEY`,
`OM_NAMESPACE_KEY`, `OM_NAMESPACE_KEY_FILE` and `OM_SHRED_WINDOW_MS` (`omstream.crypto`), the input
limits `OM_MAX_RECORD_BYTES`, `OM_MAX_DEPTH`, `OM_MAX_PARTS`, `OM_MAX_TEXT_CHARS`,
`OM_MAX_CLOCK_SKEW_MS`, `OM_MAX_HELD` (see `omstream.limits` for their defaults), the model
agents' `OM_JOB_DEADLINE_MS`, the fold agent's `OM_BATCH_MAX`, `OM_MEMORY_BATCH_MAX`,
`OM_BATCH_WAIT_MS` and `OM_STATE_CACHE`, the worker's `OM_INSTANCE_ID`, `OM_STANDBY_REPLICAS`
and `OM_ROLE`, the local model's `OM_MODEL_DIR`, `OM_LOCAL_SLOTS` and `OM_LOCAL_CONTEXT`, the
search's `OM_EMBEDDER`, the memory version `OM_VERSION` with its `OM_FOLD_MODE`,
`OM_ONLY_THREADS` and `OM_ONLY_RESOURCES`, the web server's tokens `OM_API_TOKENS` and
`OM_API_TOKENS_FILE` (`omstream.api_tokens` has their form), and `OM_CONFIG` names the file.
When `bootstrap` is set nowhere, it follows `broker_port` (the local broker `om` starts).

Every mistake is reported, all at once, as a `SettingsError` whose `problems` are
`path: problem` lines: `omstream.brokr: unknown key (did you mean 'broker_port'?)`,
`OM_PARTITIONS: expected an integer, got 'x'`, or the option errors of `observationalMemory`.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

from omstream.api_tokens import TokenGrants, grants_from_table, grants_from_text
from omstream.limits import Limits
from omstream.models.admission import parse_model_limits
from omstream.schemas.config import OmConfig, OmConfigError, Problem, load_om_config
from omstream.schemas.errors import OmError

__all__ = ["LIVE", "NAMESPACE_NAME", "ROLES", "VERSION_NAME", "Settings", "SettingsError", "env_problems",
           "file_problems", "load_settings", "read_config_file", "versioned_name"]

ENV_PREFIX = "OM_"
CONFIG_ENV = "OM_CONFIG"
RUNTIME_TABLE = "omstream"
OPTIONS_TABLES = ("observationalMemory", "observational_memory")


_LIMITS = Limits()  # their defaults live in one place
LIVE = "live"  # the version every namespace has, under the names it had before versions
ROLES = ("all", "fold", "models")  # what `om worker` runs (`omstream.worker.roles`)


@dataclass(frozen=True)
class Settings:
    """The `[omstream]` table: where things run.  Each field is a key of the table and an `OM_*`
    environment variable (its name upper-cased), which wins over the file.

    The docstring under each field is its description: `omstream.schemas.config.reference` reads
    these docstrings (with `ast`, as pydantic reads the option models') for the generated
    configuration reference, so the meaning of a key is written once, here, beside its default.
    """

    namespace: str = "om"
    """Prefix of every topic, consumer group and table: letters, digits, `.`, `_` or `-`."""
    version: str = LIVE
    """The memory version this process folds or serves (`om replay` makes others): its outputs,
    consumer group and state carry the name; `live` keeps the names without a version."""
    fold_mode: str = "follow"
    """How the version applies model results: `follow` the log's order (the live version, and a
    replay under the live configuration) or `settled` (a replay under another configuration:
    each result before the memory's next input).  `om replay` chooses it."""
    only_threads: str = ""
    """The threads this version folds (thread ids separated by commas); empty: every thread.
    Another thread's records are passed over (`om replay --threads`)."""
    only_resources: str = ""
    """In resource scope, the resources this version folds (ids separated by commas); empty:
    every resource (`om replay --resources`)."""
    bootstrap: str = "127.0.0.1:9092"
    """The Kafka brokers, `host:port` (several separated by commas).  Set nowhere, it follows
    `broker_port` (the local broker `om broker start` runs)."""
    partitions: int = 4
    """Partitions of the topics `om` creates: how many fold workers can share the work."""
    data_dir: Path = Path(".omstream")
    """Where local state lives (the fold's RocksDB tables, the local broker's data, the
    result-signing key); a relative path is taken from the working directory."""
    web_host: str = "127.0.0.1"
    """The address `om serve` listens on; one that is not loopback requires `api_tokens`."""
    web_port: int = 8765
    """The port `om serve` listens on."""
    broker_port: int = 9092
    """The client port of the local broker `om broker start` runs."""
    controller_port: int = 9093
    """The KRaft controller port of the local broker."""
    model_retries: int = 8
    """Retries of a model call that failed for a reason worth retrying (rate limit, timeout,
    server error) before its job answers with a failed result."""
    retry_base_ms: float = 1000.0
    """The first wait before a model call is retried, in milliseconds; each further retry waits
    twice as long (with jitter, up to a cap)."""
    model_concurrency: int = 32
    """Model jobs a model agent answers at once: sized for hosted providers, whose calls take
    seconds (at 2 s a call, 4 at once bound a deployment to 2 cycles/s).  Each model's own limit
    (`model_limits`, else this) narrows on rate limits; a local model answers as many as its
    `local_slots`, and a job waiting for a slot is not on its deadline."""
    model_limits: str = ""
    """Calls at once per model, `model=N` entries separated by commas
    (`"openai/gpt-4o-mini=16, anthropic/claude-3-5-haiku-latest=4"`); a model not named:
    `model_concurrency`."""
    result_key: str = field(default="", repr=False)
    """The key that signs model results (`omstream.pipeline.signing`), so the fold applies only results a
    model agent of the deployment wrote; empty: a key kept in `data_dir`.  Never printed."""
    namespace_key: str = field(default="", repr=False)
    """Wraps every per-memory data key (`omstream.crypto`): keys separated by commas, the first
    wraps and all unwrap (rotation).  Never printed."""
    namespace_key_file: str = ""
    """A file of namespace keys, one a line, read instead of `namespace_key`."""
    shred_window_ms: int = 60_000
    """How soon a shredded data key is compacted out of `<ns>.keys` (its `segment.ms` and
    `max.compaction.lag.ms`, set when the topic is created)."""
    max_record_bytes: int = _LIMITS.max_record_bytes
    """Input limit: the size of a record of `<ns>.log`, in bytes; a bigger one is dead-lettered
    as `too-large`."""
    max_depth: int = _LIMITS.max_depth
    """Input limit: JSON nesting depth of a record; a deeper one is dead-lettered as
    `too-deep`."""
    max_parts: int = _LIMITS.max_parts
    """Input limit: parts per message; more is dead-lettered as `too-many-parts`."""
    max_text_chars: int = _LIMITS.max_text_chars
    """Input limit: characters per part; more is dead-lettered as `text-too-long`."""
    max_clock_skew_ms: int = _LIMITS.max_clock_skew_ms
    """Input limit: how far a message's `createdAt` may lie after its record's timestamp; further
    is dead-lettered as `future-time`."""
    max_held: int = _LIMITS.max_held
    """Inputs a memory may hold while a blocking cycle runs; beyond it a record the fold would
    hold is dead-lettered as `memory-busy`."""
    job_deadline_ms: int = 300_000
    """A model job that has not answered after this long answers with a failed result
    (`deadline`)."""
    batch_max: int = 500
    """The fold agent folds what was delivered, up to this many records at a time; what a batch
    changes is written (and its outputs awaited) once."""
    batch_wait_ms: float = 5.0
    """A batch that finds one record waiting waits this long, once, for more."""
    memory_batch_max: int = 32
    """At most this many of a batch's records belong to one memory (its others wait for the next
    batches, round robin), so a busy memory does not slow the others of its partition."""
    state_cache: int = 1000
    """How many memories the fold agent keeps as it last wrote them, so a busy one is not read
    back from the store for every batch; 0: read every batch's memories from the store."""
    instance_id: str = ""
    """Static group membership (Kafka's `group.instance.id`): a worker restarted under the same
    id takes its partitions back at once instead of after the session timeout.  Give each worker
    of a namespace its own; empty: dynamic membership."""
    standby_replicas: int = 0
    """How many other fold workers keep a copy of each partition's state table up to date
    (Faust's `table_standby_replicas`), so one can take a dead worker's partition over without
    reading its changelog.  Off by default: Faust's standby copies can miss a stretch of the
    changelog (tests/unit/worker/test_standby_recovery.py), and a worker that takes over from
    such a copy loses memories."""
    role: str = "all"
    """What `om worker` runs (`omstream.worker.roles`): `all` (the fold and model agents in one
    process), `fold` (the fold agent alone: no litellm, no local model) or `models` (the model
    agents alone: no state table, the input log not consumed)."""
    model_dir: str = ""
    """Where `om model install` puts a local model's weights and `local/<name>` loads them from;
    empty: `$XDG_DATA_HOME/omstream/models` (one copy per user, whatever the `data_dir`)."""
    local_slots: int = 1
    """Model slots of the in-process local model server: requests decoded at once."""
    local_context: int = 16_384
    """The context length of each local model slot, in tokens (at least 2048)."""
    embedder: str = "local/wordllama"
    """What embeds observation groups for the recall tool's search
    (`omstream.projections.search.embedding`): a local model (`local/wordllama`, `local/e5-small`)
    or any litellm embedding model; the index is per embedder, so another one is an index rebuilt
    from the events."""
    api_tokens: TokenGrants = field(default=(), repr=False)
    """Who may read what from `om serve` (`omstream.api_tokens`): tokens bound to resource ids or
    `*`, as a table (`api_tokens = {"<token>" = ["u1", "u2"]}`) or, in `OM_API_TOKENS`, entries
    `TOKEN = R1, R2` separated by `;`.  Required on an address that is not loopback.  Never
    printed."""
    api_tokens_file: str = ""
    """A file of `TOKEN = R1, R2` lines, read with `api_tokens`."""
    om: OmConfig = field(default_factory=OmConfig)
    """The `[observationalMemory]` table (not an `[omstream]` key)."""
    config_file: Path | None = None
    """The settings file read, if any (`--config`, `OM_CONFIG`; not an `[omstream]` key)."""

    @property
    def thread_filter(self) -> frozenset[str]:
        return frozenset(t.strip() for t in self.only_threads.split(",") if t.strip())

    @property
    def resource_filter(self) -> frozenset[str]:
        """The memory keys of `only_resources` (`resource:<id>`)."""
        return frozenset(f"resource:{r.strip()}" for r in self.only_resources.split(",") if r.strip())

    @property
    def app_id(self) -> str:
        """The consumer group and table prefix of this version's worker."""
        return versioned_name(f"omstream-{self.namespace}", self.version)

    @property
    def worker_group(self) -> str:
        """The consumer group (and data folder) of this version's `om worker` of this role.
        Model agents apart have a group of their own: one joining or leaving never stops the
        fold workers for a rebalance, and they never share the fold's state table."""
        return f"{self.app_id}-models" if self.role == "models" else self.app_id


def versioned_name(name: str, version: str) -> str:
    """A name of the live version as it is, another version's with `.v.<version>` appended: the
    live version keeps the names it had before versions existed (topics, group, tables)."""
    return name if version == LIVE else f"{name}.v.{version}"


class SettingsError(OmError, ValueError):
    """The settings cannot be used; `problems` has one `path: problem` line per mistake."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(map(str, self.problems)))


# The keys of [omstream] and their kinds ("om" and "config_file" are not set there).
_KINDS: dict[str, str] = {f.name: str(f.type) for f in fields(Settings) if f.name not in ("om", "config_file")}
_KIND_WORDS = {"int": "an integer", "float": "a number", "str": "a string", "Path": "a path (a string)",
               "TokenGrants": "tokens"}
# Kafka's legal topic characters: the namespace prefixes every topic name.
NAMESPACE_NAME = re.compile(r"[A-Za-z0-9._-]{1,200}")
VERSION_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,47}")


def _one_line(text: object, limit: int = 240) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _parse(path: Path, text: str) -> Any:
    if path.suffix == ".toml":
        return tomllib.loads(text)
    if path.suffix in (".yaml", ".yml"):
        data = yaml.safe_load(text)  # an empty file is no settings; a bare `false` stays false
        return {} if data is None else data
    return json.loads(text)


def read_config_file(path: Path) -> Any:
    """The parsed file; a `SettingsError` naming the file if it cannot be read or parsed."""
    path = Path(path)
    if path.suffix not in (".toml", ".yaml", ".yml", ".json"):
        raise SettingsError([Problem(str(path), "use a .toml, .yaml/.yml or .json configuration file")])
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise SettingsError([Problem(str(path), "no such file")]) from None
    except IsADirectoryError:
        raise SettingsError([Problem(str(path), "is a directory, not a settings file")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise SettingsError([Problem(str(path), f"cannot be read ({_one_line(reason)})")]) from None
    try:
        return _parse(path, text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError, json.JSONDecodeError) as exc:
        kind = {".toml": "TOML", ".json": "JSON"}.get(path.suffix, "YAML")
        raise SettingsError([Problem(str(path), f"not valid {kind}: {_one_line(exc)}")]) from None


def _guess(word: str, choices: Iterable[str]) -> str:
    near = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {near[0]!r}?)" if near else ""


def _from_file(kind: str, value: Any) -> Any:
    """A file value of the key's kind; raises ValueError with the problem otherwise."""
    if kind == "TokenGrants":
        return grants_from_table(value)
    ok = {
        "int": isinstance(value, int) and not isinstance(value, bool),
        "float": isinstance(value, (int, float)) and not isinstance(value, bool),
    }.get(kind, isinstance(value, str))
    if not ok:
        raise ValueError(f"expected {_KIND_WORDS[kind]}, got {value!r}")
    return {"float": float, "Path": Path}.get(kind, lambda v: v)(value)


def _from_text(kind: str, raw: str) -> Any:
    """An environment value of the key's kind; raises ValueError with the problem otherwise."""
    if kind == "TokenGrants":
        return grants_from_text(raw)
    try:
        return {"int": int, "float": float, "Path": Path}.get(kind, str)(raw)
    except ValueError:
        raise ValueError(f"expected {_KIND_WORDS[kind]}, got {raw!r}") from None


def _out_of_range(name: str, value: Any) -> str | None:
    """Why a well-typed value still cannot work, or None."""
    if name == "namespace" and not NAMESPACE_NAME.fullmatch(value):
        return f"use letters, digits, '.', '_' or '-' (it prefixes every topic name), got {value!r}"
    if name == "version" and not VERSION_NAME.fullmatch(value):
        return (f"use lower-case letters, digits, '_' or '-' (at most 48, starting with a letter or "
                f"digit; it names topics and a consumer group), got {value!r}")
    if name == "role" and value not in ROLES:
        return f"expected one of {', '.join(map(repr, ROLES))}, got {value!r}"
    if name == "fold_mode" and value not in ("follow", "settled"):
        return f"expected 'follow' or 'settled', got {value!r}"
    if name == "bootstrap":
        for server in value.split(","):
            host, _, port = server.strip().rpartition(":")
            if not host or not port.isdigit():
                return f"expected host:port (several separated by commas), got {value!r}"
    if name.endswith("_port") and not 1 <= value <= 65535:
        return f"expected a port number from 1 to 65535, got {value!r}"
    if name in ("partitions", "model_concurrency") and value < 1:
        return f"must be at least 1, got {value!r}"
    if name in _AT_LEAST_ONE and value < 1:
        return f"must be at least 1, got {value!r}"
    if name in ("model_retries", "retry_base_ms", "max_clock_skew_ms", "batch_wait_ms", "state_cache",
                "standby_replicas") and value < 0:
        return f"must not be negative, got {value!r}"
    if name == "local_context" and value < 2048:
        return f"must be at least 2048 tokens, got {value!r}"
    if name == "model_limits":
        try:
            parse_model_limits(value)
        except ValueError as exc:
            return str(exc)
    if name == "web_host" and not value:
        return "must not be empty"
    return None


_AT_LEAST_ONE = ("shred_window_ms", "max_record_bytes", "max_depth", "max_parts", "max_text_chars", "max_held",
                 "job_deadline_ms", "batch_max", "memory_batch_max", "local_slots")


def _checked(name: str, raw: Any, convert: Callable[[str, Any], Any]) -> Any:
    value = convert(_KINDS[name], raw)
    problem = _out_of_range(name, value)
    if problem:
        raise ValueError(problem)
    return value


def _runtime_values(table: Any) -> tuple[dict[str, Any], list[Problem]]:
    """The typed values of an [omstream] table, and its problems."""
    if not isinstance(table, Mapping):
        return {}, [Problem(RUNTIME_TABLE, f"must be a table of settings, got {table!r}")]
    values: dict[str, Any] = {}
    problems: list[Problem] = []
    for key, raw in table.items():
        path = f"{RUNTIME_TABLE}.{key}"
        if key not in _KINDS:
            problems.append(Problem(path, f"unknown key{_guess(str(key), _KINDS)}"))
            continue
        try:
            values[key] = _checked(key, raw, _from_file)
        except ValueError as exc:
            problems.append(Problem(path, str(exc)))
    return values, problems


def _env_values(env: Mapping[str, str]) -> tuple[dict[str, Any], list[Problem]]:
    """The typed `OM_*` overrides, and their problems (a misspelt name is one)."""
    names = {f"{ENV_PREFIX}{key.upper()}": key for key in _KINDS}
    values: dict[str, Any] = {}
    problems: list[Problem] = []
    for var in sorted(v for v in env if v.startswith(ENV_PREFIX) and v != CONFIG_ENV):
        if var not in names:
            problems.append(Problem(var, f"unknown variable{_guess(var, [*names, CONFIG_ENV])}; unset it"))
            continue
        try:
            values[names[var]] = _checked(names[var], env[var], _from_text)
        except ValueError as exc:
            problems.append(Problem(var, str(exc)))
    return values, problems


def _table_problems(data: Mapping[Any, Any]) -> list[Problem]:
    """Top-level names other than the two tables (a bare option here would be ignored)."""
    known = (RUNTIME_TABLE, *OPTIONS_TABLES)
    return [Problem(str(key), f"unknown table{_guess(str(key), known)}; a settings file holds "
                    f"[{RUNTIME_TABLE}] and [{OPTIONS_TABLES[0]}]")
            for key in data if key not in known]


def file_problems(data: Any) -> list[Problem]:
    """What is wrong with a settings file's tables and its [omstream] table.

    A value without an [omstream] or [observationalMemory] table is not a settings file (it may
    be bare observationalMemory options, which `load_om_config` checks): no problems here.
    """
    if not isinstance(data, Mapping) or not any(k in data for k in (RUNTIME_TABLE, *OPTIONS_TABLES)):
        return []
    return _table_problems(data) + _runtime_values(data.get(RUNTIME_TABLE, {}))[1]


def env_problems(env: Mapping[str, str] | None = None) -> list[Problem]:
    """What is wrong with the `OM_*` environment variables."""
    return _env_values(dict(os.environ if env is None else env))[1]


def load_settings(path: str | Path | None = None, env: Mapping[str, str] | None = None) -> Settings:
    """The settings of the file (`path`, else `$OM_CONFIG`, else none) and the environment.

    Raises `SettingsError` listing every problem of the file, its tables and the environment.
    """
    env = dict(os.environ if env is None else env)
    path = path or env.get(CONFIG_ENV)
    values: dict[str, Any] = {}
    problems: list[Problem] = []
    options: Any = None
    if path:
        data = read_config_file(Path(path))
        if not isinstance(data, Mapping):
            raise SettingsError([Problem(str(path), (
                f"a settings file holds an [{RUNTIME_TABLE}] and an [{OPTIONS_TABLES[0]}] table, "
                f"not {data!r}"))])
        problems += _table_problems(data)
        file_values, found = _runtime_values(data.get(RUNTIME_TABLE, {}))
        values.update(file_values)
        problems += found
        options = data.get(OPTIONS_TABLES[0], data.get(OPTIONS_TABLES[1]))
        values["config_file"] = Path(path)
    env_values, found = _env_values(env)
    values.update(env_values)
    problems += found
    try:
        om = load_om_config(options)
    except OmConfigError as exc:
        problems += exc.problems
    if problems:
        raise SettingsError(problems)
    if "bootstrap" not in values and "broker_port" in values:
        # The clients must find the broker `om broker start` runs on the configured port.
        values["bootstrap"] = f"127.0.0.1:{values['broker_port']}"
    settings = replace(Settings(), **values, om=om)
    if settings.config_file and not settings.data_dir.is_absolute():
        settings = replace(settings, data_dir=(Path.cwd() / settings.data_dir))
    return settings
