"""Structured logs: one JSON object per line, with whatever `extra=` fields a call adds."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import orjson

__all__ = ["CoordinatorNotReadyFilter", "JsonFormatter", "logging_config", "setup_logging"]

# aiokafka logs every failed coordinator lookup at ERROR and retries; on a fresh broker the
# group coordinator is "not available" for the first seconds, which is expected, not an error.
COORDINATOR_LOGGER = "aiokafka.consumer.group_coordinator"
LITELLM_LOGGERS = ("LiteLLM", "LiteLLM Router")

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update({k: v for k, v in record.__dict__.items() if k not in _STANDARD})
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


class CoordinatorNotReadyFilter(logging.Filter):
    """Turns aiokafka's "Group Coordinator Request failed: ... CoordinatorNotAvailable" into a
    DEBUG record (dropped unless the logger is at DEBUG); every other record passes as it is."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not self._coordinator_not_ready(record):
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)

    @staticmethod
    def _coordinator_not_ready(record: logging.LogRecord) -> bool:
        from aiokafka.errors import GroupCoordinatorNotAvailableError

        return (record.levelno > logging.DEBUG and str(record.msg).startswith("Group Coordinator Request failed")
                and any(isinstance(a, GroupCoordinatorNotAvailableError) for a in (record.args or ())))


def logging_config(level: str = "INFO") -> dict[str, Any]:
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JsonFormatter}},
        "filters": {"coordinator_not_ready": {"()": CoordinatorNotReadyFilter}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "json"}},
        "loggers": {
            COORDINATOR_LOGGER: {"filters": ["coordinator_not_ready"]},
            # litellm logs every completion at INFO through its own stderr handler, which the
            # Faust worker re-logs as a WARNING; its warnings and errors are kept.
            **{name: {"level": "DEBUG" if level.upper() == "DEBUG" else "WARNING"} for name in LITELLM_LOGGERS},
        },
        "root": {"handlers": ["stderr"], "level": level},
    }


def setup_logging(level: str = "INFO") -> None:
    import logging.config

    logging.config.dictConfig(logging_config(level))
