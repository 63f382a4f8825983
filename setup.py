"""The package list, found from the folders.

pyproject.toml maps each top-level folder of the repository to a part of the one import
package, `omstream` ([tool.setuptools.package-dir]); every folder below one of them that holds
an `__init__.py` is a subpackage.  Finding them here, rather than listing them by hand, means a
new folder cannot be left out of the wheel.
"""

import tomllib
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent
ROOTS: dict[str, str] = tomllib.loads((HERE / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]

setup(packages=[package for root, folder in ROOTS.items()
                for package in (root, *(f"{root}.{name}" for name in find_packages(HERE / folder)))])
