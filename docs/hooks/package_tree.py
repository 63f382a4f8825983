"""MkDocs hook: a tree of symbolic links named as the package, for mkdocstrings.

The repository's folders are one import package through setuptools' package-dir (streams/ is
`omstream`, schemas/ `omstream.schemas`, ...).  griffe, which reads the package for mkdocstrings,
finds `omstream` but cannot follow the mapping to the subpackages in sibling folders, so the
Python API reference reads this tree instead (`paths:` of the python handler in mkdocs.yml), built
as `.ci/lint` builds the one mypy checks.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig

ROOT = Path(__file__).resolve().parents[2]
TREE = ROOT / ".omstream" / "docs-package"  # mkdocs.yml: plugins > mkdocstrings > handlers > python > paths
SUBPACKAGES = ("schemas", "projections", "infra", "examples")


def build_tree(root: Path = ROOT, tree: Path = TREE) -> Path:
    shutil.rmtree(tree, ignore_errors=True)
    package = tree / "omstream"
    package.mkdir(parents=True)
    for entry in sorted((root / "streams").iterdir()):
        if entry.name == "__pycache__" or entry.name.endswith(".egg-info"):
            continue
        (package / entry.name).symlink_to(entry)
    for name in SUBPACKAGES:
        if (root / name).is_dir():
            (package / name).symlink_to(root / name)
    return tree


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    build_tree()
    return config
