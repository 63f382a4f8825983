"""Every exception the package defines derives from `OmError`, so a caller (the CLI above all)
tells "refused, with a reason meant for a person" from a bug with one `except OmError`."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import omstream
import omstream.infra
import omstream.projections
import omstream.schemas
from omstream.schemas.errors import OmError

#: Modules that run something when imported.
_SKIPPED = {"omstream.cli.__main__", "omstream.__main__"}


def _exceptions() -> list[type[BaseException]]:
    # The folders are one package through package-dir, so each folder is walked on its own.
    packages = (omstream, omstream.schemas, omstream.projections, omstream.infra)
    names = {info.name for package in packages
             for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}.")}
    found = []
    for name in sorted(names):
        if name in _SKIPPED:
            continue
        module = importlib.import_module(name)
        found += [cls for _, cls in inspect.getmembers(module, inspect.isclass)
                  if issubclass(cls, BaseException) and cls.__module__ == name]
    return found


def test_every_exception_of_the_package_derives_from_om_error():
    exceptions = _exceptions()
    print(f"{len(exceptions)} exception classes: {sorted(cls.__qualname__ for cls in exceptions)}")
    assert len(exceptions) >= 30  # the walk reached the package's modules, not only its root
    strays = [f"{cls.__module__}.{cls.__qualname__}" for cls in exceptions if not issubclass(cls, OmError)]
    assert not strays, strays
