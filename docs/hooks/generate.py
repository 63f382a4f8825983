"""MkDocs hook: the two reference pages that are generated, never written by hand.

* reference/configuration.md: every `[omstream]` key and every `observationalMemory` option,
  with its type, default and description, from the code that reads them
  (`omstream.schemas.config.reference`);
* reference/http.md: every route of `om serve`, from the OpenAPI document `schemas/openapi.json`
  (`omstream.schemas.openapi_reference`).

mkdocs.yml names this file under `hooks:`; the pages exist only in the built site.  An option
without a description, or a missing OpenAPI document (the page then says it is missing), is a
warning, which `mkdocs build --strict` turns into a failed build.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

from omstream.schemas.config.reference import render_reference, undocumented
from omstream.schemas.openapi_reference import missing_document_page, render_http_reference
from omstream.settings import ENV_PREFIX, Settings

log = logging.getLogger("mkdocs.hooks.generate")

#: The checkout this hook belongs to (docs/hooks/generate.py → the repository).
ROOT = Path(__file__).resolve().parents[2]
OPENAPI = ROOT / "schemas" / "openapi.json"
CONFIGURATION_PAGE = "reference/configuration.md"
HTTP_PAGE = "reference/http.md"


def configuration_page() -> str:
    for path in undocumented(Settings):
        log.warning("configuration reference: %s has no description (write a docstring under its field)", path)
    return render_reference(Settings, env_prefix=ENV_PREFIX)


def http_page(document: Path = OPENAPI) -> str:
    if not document.is_file():
        log.warning("HTTP reference: %s is missing; the page says so", document)
        shown = document.relative_to(ROOT) if document.is_relative_to(ROOT) else document
        return missing_document_page(str(shown))
    return render_http_reference(json.loads(document.read_text(encoding="utf-8")))


def _put(files: Files, config: MkDocsConfig, src_uri: str, content: str) -> None:
    """Add a generated page, replacing a file of the same name (a stale hand-written copy)."""
    existing = files.get_file_from_path(src_uri)
    if existing is not None:
        files.remove(existing)
    files.append(File.generated(config, src_uri, content=content))


def on_files(files: Files, config: MkDocsConfig) -> Files:
    _put(files, config, CONFIGURATION_PAGE, configuration_page())
    _put(files, config, HTTP_PAGE, http_page())
    return files
