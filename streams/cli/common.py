"""What every `om` command shares: its settings, its argument types, and how a failure ends it.

A command that cannot do what was asked raises; `failure` turns what it raised into the lines
on stderr and the exit status, for every command at once:

- a settings mistake (`SettingsError`, `OmConfigError`): one `path: problem` line per mistake;
- an unreachable broker: one line naming the address and the fix;
- any other `OmError` (a refusal meant for a person, `CommandError` among them): one line,
  `om <command>: <reason>`;

exit status 1, or `EXIT_INPUT` (2) for input that cannot be used: a file that cannot be read
(`om produce`, `om simulate`), a thread with nothing to export or diff, a version or local model
that does not exist.  Anything else is a bug, and keeps its traceback.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from omstream import examples
from omstream.schemas.errors import OmError

if TYPE_CHECKING:
    from ..settings import Settings

__all__ = ["EXAMPLES", "EXIT_FAILED", "EXIT_INPUT", "EXIT_INTERRUPTED", "CommandError", "CommandMaker",
           "failure", "port_number", "report", "settings_of", "version_name"]

EXAMPLES = examples.FOLDER  # examples/ in a checkout, omstream/examples in an installed wheel

EXIT_FAILED = 1  # a mistake the user can fix: settings, broker, port, a refusal
EXIT_INPUT = 2  # input that cannot be used: an unreadable file, nothing of a thread, no such version
EXIT_INTERRUPTED = 130  # Ctrl-C, where a command says how to resume


class CommandError(OmError):
    """A command's own refusal: `om <command>: <reason>` on stderr, and the exit status."""

    def __init__(self, reason: str, status: int = EXIT_FAILED) -> None:
        super().__init__(reason)
        self.status = status


class CommandMaker(Protocol):
    """Makes a sub-command of `om` (with the global options after it) and returns its parser."""

    def __call__(self, name: str, **kwargs: Any) -> argparse.ArgumentParser: ...


def settings_of(args: argparse.Namespace, version: str | None = None) -> Settings:
    """The command's settings: `--config` and `OM_*`, the web port of `--port`, and `version`."""
    from ..settings import load_settings

    settings = load_settings(args.config)
    if getattr(args, "port", None) is not None:
        settings = replace(settings, web_port=args.port)
    return replace(settings, version=version) if version else settings


def command_name(args: argparse.Namespace) -> str:
    """How the command's messages name it: `om broker` and `om model` with their action."""
    return f"{args.command} {args.action}" if args.command in ("broker", "model") else str(args.command)


def failure(args: argparse.Namespace, exc: Exception) -> tuple[list[str], int] | None:
    """The lines to print and the exit status for an error a user can fix; None for a bug."""
    from aiokafka.errors import KafkaConnectionError

    from omstream.projections.serve import ListenError
    from omstream.schemas.config import OmConfigError

    from ..conversations.export import UnknownVersion
    from ..models.local import LocalModelMissing
    from ..processes import port_in_use
    from ..settings import SettingsError

    name = f"om {command_name(args)}"
    if isinstance(exc, (SettingsError, OmConfigError)):
        return [str(problem) for problem in exc.problems], EXIT_FAILED
    if isinstance(exc, KafkaConnectionError):
        return [f"{name}: cannot reach the Kafka broker at {_bootstrap(args)}: start it with "
                "`om broker start`, or set omstream.bootstrap / OM_BOOTSTRAP"], EXIT_FAILED
    if isinstance(exc, ListenError):
        reason = (port_in_use(exc.port, "web_port", "--port") if exc.in_use
                  else f"{exc.strerror}; check omstream.web_host / OM_WEB_HOST")
        return [f"{name}: {reason}"], EXIT_FAILED
    if isinstance(exc, CommandError):
        return [f"{name}: {exc}"], exc.status
    if isinstance(exc, (UnknownVersion, LocalModelMissing)):
        return [f"{name}: {exc}"], EXIT_INPUT
    if isinstance(exc, OmError):
        return [f"{name}: {exc}"], EXIT_FAILED
    return None


def report(args: argparse.Namespace, exc: Exception) -> int | None:
    """Print the failure's lines on stderr and return its exit status; None for a bug."""
    found = failure(args, exc)
    if found is None:
        return None
    lines, status = found
    for line in lines:
        print(line, file=sys.stderr)
    return status


def _bootstrap(args: argparse.Namespace) -> str:
    from ..settings import load_settings

    try:
        return load_settings(args.config).bootstrap
    except ValueError:
        return "the configured address"


# --- argument types ----------------------------------------------------------------------------
def port_number(text: str) -> int:
    """An argparse type: a TCP port number."""
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number from 1 to 65535, got {text!r}")
    return int(text)


def version_name(name: str) -> str:
    """An argparse type: a memory version's name."""
    from ..settings import VERSION_NAME

    if not VERSION_NAME.fullmatch(name):
        raise argparse.ArgumentTypeError(
            f"{name!r}: use lower-case letters, digits, '_' or '-' (at most 48, starting with a letter or digit)")
    return name
