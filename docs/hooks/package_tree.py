"""MkDocs hook: a tree of symbolic links named as the package, for mkdocstrings.

The repository's folders are one import package through setuptools' package-dir (streams/ is
`omstream`, schemas/ `omstream.schemas`, ...).  griffe, which reads the package for mkdocstrings,
finds `omstream` but cannot follow the mapping to the subpackages in sibling folders, so the
Python API reference reads this tree instead (`paths:` of the python handler in mkdocs.yml).
mypy cannot follow the mapping either: `.ci/lint` builds its tree with this file too
(`python docs/hooks/package_tree.py DIR`).
"""

from __future__ import annotations

import shutil
import sys
import tomllib
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.plugins import event_priority

ROOT = Path(__file__).resolve().parents[2]
TREE = ROOT / ".omstream" / "docs-package"  # mkdocs.yml: plugins > mkdocstrings > handlers > python > paths


def build_tree(root: Path = ROOT, tree: Path = TREE) -> Path:
    """Link each folder of pyproject.toml's package-dir under its import path in `tree`."""
    folders = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    shutil.rmtree(tree, ignore_errors=True)
    package = tree / "omstream"
    package.mkdir(parents=True)
    for entry in sorted((root / folders["omstream"]).iterdir()):
        if entry.name != "__pycache__" and not entry.name.endswith(".egg-info"):
            (package / entry.name).symlink_to(entry)
    for name, folder in folders.items():
        if name != "omstream":  # omstream.schemas -> schemas/, ...
            (package / name.removeprefix("omstream.")).symlink_to(root / folder)
    return tree


# Before mkdocstrings' own `on_config` (priority 0): its python handler expands `paths` as globs,
# which drops a folder that does not exist yet, and on a fresh clone griffe then finds `omstream`
# through the editable install, without the subpackages in sibling folders ("Could not collect
# 'omstream.schemas.messages.Message'", the CI failure this priority fixes).
@event_priority(100)
def on_config(config: MkDocsConfig) -> MkDocsConfig:
    build_tree()
    return config


if __name__ == "__main__":
    build_tree(tree=Path(sys.argv[1]).resolve())
