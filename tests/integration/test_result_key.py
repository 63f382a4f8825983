"""Workers of one namespace sign model results with one key, or the newcomer does not start.

A result answered by one worker's model agent is folded by whichever fold worker owns the
memory then; with two keys it would be dead-lettered as `forged-result` and its memory would
wait for the cycle's deadline.  So each worker compares its key's fingerprint with the one
recorded in `<ns>.versions` before it joins its group (`omstream.worker.key_agreement`).
"""

import asyncio
import time
from dataclasses import replace

import pytest

from omstream.pipeline.signing import fingerprint
from omstream.versions import read_registry
from omstream.worker.key_agreement import ResultKeyMismatch, agree_on_result_key

pytestmark = pytest.mark.integration


def wait_for(worker, text: str, timeout: float = 90.0) -> None:
    """Until the worker's log shows `text` (or it exits, which fails)."""
    deadline = time.monotonic() + timeout
    while text not in worker.tail(20000):
        assert worker.proc.poll() is None, worker.tail()
        assert time.monotonic() < deadline, f"no {text!r} after {timeout}s: {worker.tail()}"
        time.sleep(0.2)


def refused(worker, timeout: float = 60.0) -> str:
    """The one line a worker that does not start prints; asserts exit status 1."""
    assert worker.proc.wait(timeout) == 1, worker.tail()
    lines = [line for line in worker.tail().splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


def test_a_worker_with_another_signing_key_refuses_to_start(new_env, tmp_path):
    env = new_env()
    first = env.start_worker(role="fold", env={"OM_RESULT_KEY": "shared-secret"})
    wait_for(first, "fold agent ready")
    registry = asyncio.run(read_registry(env.settings))
    assert registry.result_key == fingerprint(b"shared-secret")

    # Same key, other machine (its own data directory): it starts.
    same = env.start_worker(role="models", data_dir=tmp_path / "other", env={"OM_RESULT_KEY": "shared-secret"})
    wait_for(same, "model agent ready")

    # Another configured key: refused, naming the setting.
    line = refused(env.start_worker(role="models", env={"OM_RESULT_KEY": "another"}))
    assert line.startswith("om worker: the result-signing key differs") and "OM_RESULT_KEY" in line, line
    assert "shared-secret" not in line and "another" not in line  # never the key itself

    # No key configured and a data directory of its own: its own key, refused too.
    line = refused(env.start_worker(role="fold", data_dir=tmp_path / "lonely"))
    assert "result.key" in line and "OM_RESULT_KEY" in line, line

    # Changing keys: with the others stopped, one worker adopts the new key (`om worker
    # --adopt-key` does this before it starts); then a worker with the old key is refused.
    first.stop()
    same.stop()
    with pytest.raises(ResultKeyMismatch, match="OM_RESULT_KEY"):
        asyncio.run(agree_on_result_key(replace(env.settings, result_key="new-secret"), b"new-secret"))
    assert asyncio.run(agree_on_result_key(env.settings, b"new-secret", adopt=True)) == "adopted"
    assert asyncio.run(agree_on_result_key(env.settings, b"new-secret")) == "agrees"
    line = refused(env.start_worker(role="fold", env={"OM_RESULT_KEY": "shared-secret"}))
    assert "OM_RESULT_KEY" in line, line
    print(f"\nnamespace key {registry.result_key[:12]}: the same key on another data directory started; "
          f"another configured key, a data directory's own key and, after --adopt-key, the old key "
          f"were refused with one line each")
