"""The engine is a pure function of its inputs: it imports nothing that does I/O, reads a clock
or draws a random number, and nothing outside `omstream.engine`, `omstream.schemas`, the
standard library and a few pure libraries (that no product module takes part in an import
cycle is test_layout.py's).

A model table (litellm's) is the edge's to read: the engine is handed the answers
(`EngineConfig.takes_attachments`), so folding never imports a model client.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[3] / "streams" / "engine"
MODULES = sorted(ENGINE.rglob("*.py"))

#: Third-party libraries the engine may use: pure computation on values it is given (pydantic
#: models, orjson bytes, tiktoken counts from its bundled files, jsonschema validation, xxhash
#: digests of thread ids).
PURE_LIBRARIES = {"pydantic", "orjson", "tiktoken", "jsonschema", "xxhash"}
#: Standard-library modules that reach the network, other processes, threads, a clock or
#: randomness: none of them belongs in a fold.
#: `os` too: the environment and the files are the edge's (the package's start-up sets tiktoken's
#: cache directory, `omstream/__init__.py`).
IO_STDLIB = {"asyncio", "socket", "ssl", "select", "selectors", "subprocess", "threading", "multiprocessing",
             "concurrent", "http", "urllib.request", "time", "random", "secrets", "signal", "sqlite3",
             "shutil", "tempfile", "os"}
#: Packages the fold must never bring in, directly or through anything it imports.
FORBIDDEN_AT_RUN_TIME = {"litellm", "openai", "faust", "mode", "aiokafka", "kafka", "aiohttp", "httpx",
                         "requests", "rocksdict"}


def _imports(path: Path) -> list[tuple[str, int]]:
    """Every import of the module, at any depth (a function-level import counts), as
    (absolute module name, or the relative one with its level)."""
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(a.name, 0) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                found.append((node.module or "", 0))
            else:
                found += [(f"{node.module}" if node.module else a.name, node.level) for a in node.names]
    return found


def _allowed(name: str) -> bool:
    top = name.split(".")[0]
    if name == "omstream.engine" or name.startswith(("omstream.engine.", "omstream.schemas")):
        return True
    if top in PURE_LIBRARIES:
        return True
    parts = name.split(".")
    banned = any(".".join(parts[:i]) in IO_STDLIB for i in range(1, len(parts) + 1))
    return top in sys.stdlib_module_names and not banned


def _depth(path: Path) -> int:
    """How many packages below `omstream.engine` the module sits (0 for fold.py, 1 in a room)."""
    return len(path.relative_to(ENGINE).parts) - 1


def test_engine_imports_only_the_engine_the_schemas_the_stdlib_and_pure_libraries():
    # A relative import may climb to the engine's top, never above it.
    wrong = [f"{path.relative_to(ENGINE)}: {name}" for path in MODULES for name, level in _imports(path)
             if (level == 0 and not _allowed(name)) or level > 1 + _depth(path)]
    assert not wrong, wrong
    for path in MODULES:
        text = path.read_text()
        assert "datetime.now" not in text and "uuid4" not in text, path.relative_to(ENGINE)


def test_the_import_rule_would_catch_a_model_client_or_a_clock():
    assert not _allowed("omstream.models.capabilities")
    assert not _allowed("litellm") and not _allowed("faust") and not _allowed("aiohttp")
    assert not _allowed("time") and not _allowed("urllib.request") and not _allowed("asyncio.tasks")
    assert not _allowed("os") and not _allowed("os.path")
    assert _allowed("urllib.parse") and _allowed("omstream.schemas.keys") and _allowed("pydantic")


_FOLD_WITH_ATTACHMENTS = textwrap.dedent("""
    import importlib, json, pkgutil, sys
    from datetime import UTC, datetime, timedelta

    import omstream.engine
    for info in pkgutil.walk_packages(omstream.engine.__path__, "omstream.engine."):
        importlib.import_module(info.name)

    from omstream.engine.fold import fold, new_state
    from omstream.engine.step import EngineConfig
    from omstream.schemas.config import load_om_config
    from omstream.schemas.messages import Message

    # "auto" asks whether the observer takes images: a question for a model table.
    config = EngineConfig(load_om_config({"observation": {
        "model": "openai/gpt-4o", "messageTokens": 300, "bufferTokens": False,
        "observeAttachments": "auto"}}))
    state = new_state("thread:t1", "t1", None)
    jobs = []
    t0 = datetime(2025, 3, 3, 9, tzinfo=UTC)
    for i in range(12):
        content = [{"type": "text", "text": "word " * 60},
                   {"type": "image", "image": "https://x.test/cat.png"}]
        message = Message.model_validate({"id": f"m{i}", "threadId": "t1", "role": "user",
                                          "content": content,
                                          "createdAt": (t0 + timedelta(minutes=i)).isoformat()})
        out = fold(state, message, config)
        state, jobs = out.state, jobs + list(out.jobs)
    print(json.dumps({"jobs": len(jobs), "modules": sorted(sys.modules)}))
""")


def test_folding_imports_no_model_client_broker_or_store():
    """In a fresh interpreter: import every engine module and fold messages with images up to
    an observation whose attachment policy asks about the model; nothing forbidden is loaded."""
    run = subprocess.run([sys.executable, "-c", _FOLD_WITH_ATTACHMENTS], capture_output=True, text=True,
                         check=True, timeout=120)
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen["jobs"] >= 1
    modules = seen["modules"]
    forbidden = sorted({m.split(".")[0] for m in modules} & FORBIDDEN_AT_RUN_TIME)
    assert not forbidden, forbidden
    outside = [m for m in modules if m.startswith("omstream.")
               and not m.startswith(("omstream.engine", "omstream.schemas"))]
    assert not outside, outside
