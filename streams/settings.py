"""Runtime settings: one file (TOML, YAML or JSON) plus `OM_*` environment variables.

A file holds two tables, read by the worker, the web server and the CLI alike::

    [omstream]                 # where things run
    namespace = "om"           # prefix of every topic, consumer group and table
    bootstrap = "127.0.0.1:9092"
    partitions = 4

    [observationalMemory]      # what the memory does (schemas.config.OmConfig)
    observation = { model = "scripted/observer", messageTokens = 3000, bufferTokens = false }

Environment variables override the file: `OM_NAMESPACE`, `OM_BOOTSTRAP`, `OM_PARTITIONS`,
`OM_DATA_DIR`, `OM_WEB_HOST`, `OM_WEB_PORT`, `OM_BROKER_PORT`, `OM_CONTROLLER_PORT`,
`OM_MODEL_RETRIES`, `OM_RETRY_BASE_MS`, `OM_MODEL_CONCURRENCY`, and `OM_CONFIG` names the file.
"""

from __future__ import annotations

import json
import os
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

from omstream.schemas.config import OmConfig, load_om_config

__all__ = ["Settings", "load_settings", "read_config_file"]


@dataclass(frozen=True)
class Settings:
    namespace: str = "om"
    bootstrap: str = "127.0.0.1:9092"
    partitions: int = 4
    data_dir: Path = Path(".omstream")
    web_host: str = "127.0.0.1"
    web_port: int = 8765
    broker_port: int = 9092
    controller_port: int = 9093
    model_retries: int = 8
    retry_base_ms: float = 1000.0
    model_concurrency: int = 4
    om: OmConfig = field(default_factory=OmConfig)
    config_file: Path | None = None

    @property
    def app_id(self) -> str:
        return f"omstream-{self.namespace}"


def read_config_file(path: Path) -> dict[str, Any]:
    text = path.read_text()
    if path.suffix == ".toml":
        return tomllib.loads(text)
    if path.suffix in (".yaml", ".yml"):
        data = yaml.safe_load(text)  # an empty file is no settings; a bare `false` stays false
        return {} if data is None else data
    if path.suffix == ".json":
        return json.loads(text)
    raise ValueError(f"{path}: use a .toml, .yaml/.yml or .json configuration file")


def _coerce(name: str, raw: str) -> Any:
    kind = {f.name: f.type for f in fields(Settings)}[name]
    if kind == "int":
        return int(raw)
    if kind == "float":
        return float(raw)
    if kind in ("Path", "Path | None"):
        return Path(raw)
    return raw


def load_settings(path: str | Path | None = None, env: dict[str, str] | None = None) -> Settings:
    env = dict(os.environ if env is None else env)
    path = path or env.get("OM_CONFIG")
    values: dict[str, Any] = {}
    om: dict[str, Any] | bool | None = None
    if path:
        data = read_config_file(Path(path))
        runtime = data.get("omstream", {})
        unknown = set(runtime) - {f.name for f in fields(Settings)} - {"om"}
        if unknown:
            raise ValueError(f"{path}: unknown [omstream] settings {sorted(unknown)}")
        values.update({k: _coerce(k, str(v)) if k == "data_dir" else v for k, v in runtime.items()})
        om = data.get("observationalMemory", data.get("observational_memory"))
        values["config_file"] = Path(path)
    for f in fields(Settings):
        raw = env.get(f"OM_{f.name.upper()}")
        if raw is not None and f.name not in ("om", "config_file"):
            values[f.name] = _coerce(f.name, raw)
    settings = replace(Settings(), **values, om=load_om_config(om))
    if settings.config_file and not settings.data_dir.is_absolute():
        settings = replace(settings, data_dir=(Path.cwd() / settings.data_dir))
    return settings
