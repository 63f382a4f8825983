"""What `pip install omstream` puts into site-packages: one import name, `omstream`, with the
files it reads at run time (JSON Schemas, the broker's Maven pom)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "setup.py", "README.md", "LICENSE", "streams", "schemas", "projections", "infra",
           "examples")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    """A wheel built from a copy of the sources (an in-tree build would leave files behind)."""
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("dist")
    for name in SOURCES:
        copy = shutil.copytree if (REPO / name).is_dir() else shutil.copy
        copy(REPO / name, src / name, **({"ignore": shutil.ignore_patterns("__pycache__", "target")}
                                        if (REPO / name).is_dir() else {}))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "--quiet", "-w", str(out), str(src)], check=True)
    [built] = out.glob("omstream-*.whl")
    return zipfile.ZipFile(built)


def test_the_wheel_has_one_top_level_import_name(wheel):
    tops = {name.split("/")[0] for name in wheel.namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"omstream"}
    [top_level] = [n for n in wheel.namelist() if n.endswith(".dist-info/top_level.txt")]
    assert wheel.read(top_level).decode().split() == ["omstream"]


def test_the_wheel_holds_every_module_of_the_source_folders(wheel):
    """Every `.py` file of the five folders is in the wheel under its import path (the package
    list is found from the folders: a new subpackage cannot be left out, as `recall` once was)."""
    roots = {"streams": "omstream", "schemas": "omstream/schemas", "projections": "omstream/projections",
             "infra": "omstream/infra", "examples": "omstream/examples"}
    expected = {f"{roots[folder]}/{path.relative_to(REPO / folder).as_posix()}"
                for folder in roots for path in (REPO / folder).rglob("*.py") if "__pycache__" not in path.parts}
    shipped = {name for name in wheel.namelist() if name.endswith(".py")}
    assert expected - shipped == set()
    assert shipped - expected == set()


def test_the_wheel_is_typed_and_says_what_it_is(wheel):
    names = set(wheel.namelist())
    assert "omstream/py.typed" in names  # PEP 561
    metadata_file = next(n for n in names if n.endswith(".dist-info/METADATA"))
    fields = wheel.read(metadata_file).decode()
    assert "License-Expression: Apache-2.0" in fields
    assert "Classifier: Typing :: Typed" in fields and "Keywords:" in fields


def test_the_wheel_carries_what_the_package_reads_at_run_time(wheel):
    names = set(wheel.namelist())
    assert {"omstream/__init__.py", "omstream/engine/fold.py", "omstream/schemas/json/index.json",
            "omstream/infra/kafka/pom.xml", "omstream/projections/views/context.py",
            "omstream/examples/demo.toml", "omstream/examples/demo-conversation.jsonl"} <= names
    from omstream.projections.http.dashboard import PAGES, STATIC

    assert {f"omstream/projections/static/{name}" for name in (*PAGES, *STATIC)} <= names  # the dashboard
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "om = omstream.cli:main" in wheel.read(entry_points).decode()


def test_the_installed_distribution_provides_only_omstream():
    provided = {name for name, dists in metadata.packages_distributions().items() if "omstream" in dists}
    assert provided == {"omstream"}


def test_the_public_api_imports_from_omstream_alone():
    import omstream

    assert set(omstream.__all__) >= {"OmClient", "Message", "load_settings", "simulate"}
    for name in omstream.__all__:
        assert getattr(omstream, name).__module__.startswith("omstream.")


def test_importing_the_engine_loads_no_kafka_client_or_model_library():
    code = ("import sys, omstream.engine.fold; "
            "print(sorted(m for m in ('aiokafka', 'faust', 'litellm') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
