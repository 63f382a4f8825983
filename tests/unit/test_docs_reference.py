"""docs/hooks/generate.py, the MkDocs hook that adds the generated reference pages: the pages it
adds are the renderers' output for the code and the committed OpenAPI document.
(`mkdocs build --strict`, in CI, builds them for real.)"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("mkdocs")

from mkdocs.config import load_config  # noqa: E402
from mkdocs.config.defaults import MkDocsConfig  # noqa: E402
from mkdocs.structure.files import Files, get_files  # noqa: E402

from omstream.schemas.config.reference import render_reference  # noqa: E402
from omstream.schemas.openapi_reference import render_http_reference  # noqa: E402
from omstream.settings import Settings  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_hook_generate", ROOT / "docs" / "hooks" / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _config(tmp_path: Path) -> MkDocsConfig:
    """A site with the hook, as mkdocs.yml names it, and one hand-written page where a generated
    one goes (the hook replaces it)."""
    (tmp_path / "docs" / "reference").mkdir(parents=True)
    (tmp_path / "docs" / "reference" / "configuration.md").write_text("# written by hand\n")
    (tmp_path / "mkdocs.yml").write_text(
        f"site_name: test\ndocs_dir: docs\nhooks:\n  - {ROOT / 'docs' / 'hooks' / 'generate.py'}\n")
    return load_config(str(tmp_path / "mkdocs.yml"))


def _page(files: Files, uri: str) -> str:
    page = files.get_file_from_path(uri)
    assert page is not None and page.generated_by is not None
    return page.content_string


def test_the_hook_adds_both_pages_from_the_code(tmp_path: Path) -> None:
    config = _config(tmp_path)
    files = config.plugins.on_files(get_files(config), config=config)
    assert _page(files, "reference/configuration.md") == render_reference(Settings, env_prefix="OM_")
    openapi = ROOT / "schemas" / "openapi.json"
    if openapi.is_file():
        assert _page(files, "reference/http.md") == render_http_reference(json.loads(openapi.read_text()))
    assert sum(1 for f in files if f.src_uri == "reference/configuration.md") == 1


def test_without_the_openapi_document_the_page_says_it_is_missing(tmp_path: Path) -> None:
    assert "is missing" in _hook().http_page(tmp_path / "openapi.json")
