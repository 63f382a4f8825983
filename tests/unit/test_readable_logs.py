"""Startup logs without false alarms; a failed model call is a WARNING with its error code."""

import logging
from datetime import UTC, datetime

from aiokafka.errors import GroupCoordinatorNotAvailableError, NotCoordinatorForGroupError

from omstream.logs import COORDINATOR_LOGGER, CoordinatorNotReadyFilter, logging_config


def record(msg: str, *args, level: int = logging.ERROR, name: str = COORDINATOR_LOGGER):
    return logging.LogRecord(name, level, __file__, 1, msg, args, None)


def test_a_fresh_brokers_coordinator_is_debug_not_error():
    lookup = "Group Coordinator Request failed: %s"
    f = CoordinatorNotReadyFilter()
    logger = logging.getLogger(COORDINATOR_LOGGER)
    before = logger.level
    try:
        logger.setLevel(logging.INFO)
        quiet = record(lookup, GroupCoordinatorNotAvailableError())
        assert f.filter(quiet) is False and quiet.levelname == "DEBUG"
        logger.setLevel(logging.DEBUG)
        shown = record(lookup, GroupCoordinatorNotAvailableError())
        assert f.filter(shown) is True and shown.levelno == logging.DEBUG
        logger.setLevel(logging.INFO)
        # anything else is left alone: another error of the same lookup, or another message
        other = record(lookup, NotCoordinatorForGroupError())
        assert f.filter(other) is True and other.levelno == logging.ERROR
        heartbeat = record("Heartbeat failed: %r", GroupCoordinatorNotAvailableError())
        assert f.filter(heartbeat) is True and heartbeat.levelno == logging.ERROR
    finally:
        logger.setLevel(before)


def test_the_worker_and_web_logging_config_filters_that_logger():
    config = logging_config("INFO")
    [name] = config["loggers"][COORDINATOR_LOGGER]["filters"]
    assert config["filters"][name]["()"] is CoordinatorNotReadyFilter
    assert config["disable_existing_loggers"] is False


def _result(ok: bool):
    from omstream.schemas.jobs import ModelResult

    now = datetime.now(UTC)
    common = {"kind": "observe", "cycle_id": "c1", "memory_key": "thread:t1", "thread_id": "t1",
              "request_hash": "h"}
    failure = {} if ok else {"error": "RateLimitError: slow down", "error_code": "rate-limited",
                             "error_status": 429}
    result = ModelResult(**common, ok=ok, model="scripted/observer", attempts=3,
                         output="x" if ok else None, **failure, started_at=now, completed_at=now)
    return result


def test_a_failed_model_call_is_a_warning_with_its_error_code(caplog):
    from omstream.pipeline.answering import log_model_call

    caplog.set_level(logging.INFO, logger="omstream.worker")
    log_model_call(_result(ok=False))
    [failed] = caplog.records
    assert failed.levelno == logging.WARNING
    assert failed.getMessage() == "model call failed: rate-limited"
    assert (failed.errorCode, failed.errorStatus, failed.attempts) == ("rate-limited", 429, 3)
    caplog.clear()
    log_model_call(_result(ok=True))
    [answered] = caplog.records
    assert answered.levelno == logging.INFO and answered.ok is True


def test_litellm_info_lines_are_left_out_unless_debugging():
    from omstream.logs import LITELLM_LOGGERS

    assert all(logging_config("INFO")["loggers"][n]["level"] == "WARNING" for n in LITELLM_LOGGERS)
    assert all(logging_config("DEBUG")["loggers"][n]["level"] == "DEBUG" for n in LITELLM_LOGGERS)
