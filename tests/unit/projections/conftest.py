"""The Node.js packages of tests/js, for the tests that read the feed as JavaScript clients do
(the AI SDK, a browser's EventSource)."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from omstream.infra.file_lock import exclusive

JS = Path(__file__).resolve().parents[2] / "js"


@pytest.fixture(scope="session")
def node_packages() -> Path:
    """tests/js with every package its package.json names, installed from the lock file (`npm
    ci`: the npm registry is one this project may reach) when one is missing."""
    assert shutil.which("node") and shutil.which("npm"), "these tests need Node.js and npm"
    wanted = json.loads((JS / "package.json").read_text(encoding="utf-8"))["dependencies"]
    with exclusive(JS / "node_modules.lock"):  # `npm ci` empties node_modules first: one at a time
        if not all((JS / "node_modules" / name).is_dir() for name in wanted):
            subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=JS, check=True, timeout=600)
    return JS
