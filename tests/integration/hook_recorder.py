"""Lifecycle hooks for the broker test of hooks (tests/integration/test_hooks_broker.py): each call
is appended as a JSON line to the file `HOOK_RECORD_FILE` names (the worker is another process)."""

import json
import os


def _write(name: str, payload: dict) -> None:
    with open(os.environ["HOOK_RECORD_FILE"], "a", encoding="utf-8") as out:
        out.write(json.dumps({"hook": name, **payload}) + "\n")


def on_observation_start(payload: dict) -> None:
    _write("onObservationStart", payload)


async def on_observation_end(payload: dict) -> None:
    _write("onObservationEnd", payload)


def on_reflection_start(payload: dict) -> None:
    _write("onReflectionStart", payload)


def on_reflection_end(payload: dict) -> None:
    _write("onReflectionEnd", payload)
