"""The ``olympia`` command line: inspect, repair and maintain a catalog.

Every command takes the catalog as ``--warehouse URI`` or from the
``OLYMPIA_WAREHOUSE`` environment variable. Output is a table for people, or
JSON with ``--json`` (one document on stdout). Exit codes: 0 success, 1 the
command ran and found a problem (``fsck`` found damage, a commit conflicted),
2 bad input (usage, a missing catalog, an unknown version or object, a bad
name), 3 a damaged catalog or a storage failure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
from collections.abc import Sequence
from typing import Any, NoReturn

import olympia
from olympia.cli import history, inspect, maintain, serve, txn
from olympia.cli.base import (
    ENV_WAREHOUSE,
    EXIT_DAMAGED,
    EXIT_OK,
    EXIT_PROBLEM,
    EXIT_USAGE,
    CliError,
    Command,
    Out,
    Parser,
    UsageError,
    examples_epilog,
)
from olympia.errors import (
    CommitConflictError,
    CorruptCatalogError,
    InvalidArgumentError,
    NoSuchObjectError,
    ObjectAlreadyExistsError,
    OlympiaError,
    StorageError,
)

#: The subcommands, in the order ``--help`` lists them.
COMMANDS: tuple[Command, ...] = (
    maintain.INIT,
    inspect.LS,
    inspect.SHOW,
    history.LOG,
    history.DIFF,
    history.GRAPH,
    maintain.ROLLBACK,
    maintain.EXPORT,
    maintain.EXPIRE,
    maintain.FSCK,
    maintain.ORPHANS,
    serve.SERVE,
    txn.TXN,
)


def _common_options(nested: bool = False) -> Parser:
    """The options every command takes; ``nested``: for the parser of an
    action below a command (``olympia txn list``), whose options given there
    add to those given before the action rather than resetting them."""
    common = Parser(add_help=False)
    if nested:  # an option not given after the action keeps its value from before it
        common.argument_default = argparse.SUPPRESS
    common.add_argument(
        "--warehouse",
        "-w",
        metavar="URI",
        help=f"the catalog: a folder, file://, s3://bucket/prefix (default: ${ENV_WAREHOUSE})",
    )
    common.add_argument(
        "--storage-option",
        "-o",
        action="append",
        metavar="KEY=VALUE",
        help="an S3 setting, as PyIceberg names it: s3.endpoint, s3.region, s3.access-key-id, "
        "s3.secret-access-key, s3.session-token, ... (s3fs's own names such as endpoint_url "
        "work too), e.g. -o s3.endpoint=http://localhost:9000 (repeatable)",
    )
    common.add_argument("--json", action="store_true", help="print JSON instead of tables")
    return common


#: The values of the common options (:func:`_common_options`) not given.
COMMON_DEFAULTS: dict[str, Any] = {"warehouse": None, "storage_option": None, "json": False}


def build_parser() -> argparse.ArgumentParser:
    """The ``olympia`` parser: the top level, then one subparser per entry of
    :data:`COMMANDS`, which declares its own arguments."""
    parser = Parser(
        prog="olympia",
        # The options every command takes may come before the command too
        # (olympia -w /data/lake ls); given after it, they win.
        parents=[_common_options(nested=True)],
        description=textwrap.dedent(
            """\
            Inspect, repair and maintain an olympia catalog: a lakehouse catalog that
            lives only in files (a folder or S3) and gives Iceberg tables transactions
            across many tables."""
        ),
        epilog=examples_epilog(
            "olympia init -w /data/lake",
            "export OLYMPIA_WAREHOUSE=s3://bucket/lake",
            "olympia ls",
            "olympia log --graph",
            "olympia fsck --json",
        )
        + "\n\nexit codes: 0 ok, 1 a problem found (fsck) or a conflict, 2 bad input, "
        "3 a damaged catalog or a storage failure",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version", "--olympia-version", action="version", version=olympia.__version__
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    # Every level leaves an option it was not given unset (argparse copies
    # a subparser's defaults over what the level above parsed); main() fills
    # in the defaults once everything is parsed.
    nested = _common_options(nested=True)
    for command in COMMANDS:
        p = sub.add_parser(
            command.name,
            parents=[nested],
            help=command.help,
            description=command.help,
            epilog=examples_epilog(*command.examples),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.set_defaults(fn=command.run)
        command.arguments(p, nested)
    return parser


def _storage_failed(exc: BaseException) -> bool:
    """Whether a StorageError caused ``exc`` (directly or further down)."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, StorageError):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


def _one_line(message: str) -> str:
    return " ".join(message.split())


def _fail(out: Out | None, code: int, message: str, usage: str | None = None) -> NoReturn:
    """Report an error: one line on stderr (never wrapped), and under
    ``--json`` also a JSON document on stdout."""
    message = _one_line(message)
    if out is not None and out.json:
        doc: dict[str, Any] = {"error": message, "exit_code": code}
        if usage:
            doc["usage"] = _one_line(usage)
        print(json.dumps(doc))
    if usage:
        sys.stderr.write(usage + "\n")
    sys.stderr.write(f"olympia: error: {message}\n")
    sys.stderr.flush()
    raise SystemExit(code)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
    except UsageError as exc:
        _fail(Out("--json" in argv), EXIT_USAGE, str(exc), exc.usage)
    for name, default in COMMON_DEFAULTS.items():
        if not hasattr(args, name):
            setattr(args, name, default)
    out = Out(bool(getattr(args, "json", False)))
    try:
        return int(args.fn(args, out))
    except BrokenPipeError:
        # The reader went away (`olympia log | head`): not an error of ours.
        # Point stdout at nothing so that flushing it at exit is quiet too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except CliError as exc:
        _fail(out, EXIT_USAGE, str(exc))
    except NoSuchObjectError as exc:
        version = getattr(args, "version", None)
        # Read as of an older version, "does not exist" alone reads as a wrong name.
        suffix = f" at version {version}" if isinstance(version, int) else ""
        _fail(out, EXIT_USAGE, f"{exc}{suffix}")
    except (InvalidArgumentError, ObjectAlreadyExistsError) as exc:
        _fail(out, EXIT_USAGE, str(exc))
    except olympia.CatalogNotFoundError as exc:
        _fail(out, EXIT_USAGE, f"{exc} (create one with `olympia init`)")
    except olympia.CatalogAlreadyExistsError as exc:
        _fail(out, EXIT_USAGE, str(exc))
    except olympia.VersionNotFoundError as exc:
        _fail(out, EXIT_USAGE, str(exc))
    except CommitConflictError as exc:
        _fail(out, EXIT_PROBLEM, str(exc))
    except (CorruptCatalogError, StorageError) as exc:
        _fail(out, EXIT_DAMAGED, str(exc))
    except OlympiaError as exc:
        # A commit that failed because storage did (a folder not writable)
        # is a storage failure, not a conflict.
        _fail(out, EXIT_DAMAGED if _storage_failed(exc) else EXIT_PROBLEM, str(exc))
    except KeyboardInterrupt:
        _fail(None, 130, "interrupted")


__all__ = ["COMMANDS", "CliError", "Command", "build_parser", "main"]
