"""What every command shares: exit codes, errors, output, opening the catalog,
argument types, and the :class:`Command` record each command module fills."""

from __future__ import annotations

import argparse
import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NoReturn

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

import olympia
from olympia.catalog import Catalog, CatalogVersion

EXIT_OK, EXIT_PROBLEM, EXIT_USAGE, EXIT_DAMAGED = 0, 1, 2, 3

ENV_WAREHOUSE = "OLYMPIA_WAREHOUSE"


class CliError(Exception):
    """A user's mistake found by the command line itself."""


class UsageError(CliError):
    """A command line argparse refused; ``usage`` is the command's usage line."""

    def __init__(self, message: str, usage: str) -> None:
        super().__init__(message)
        self.usage = usage


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is raised (as :class:`UsageError`) so
    that ``main`` reports it like every other error: one line, JSON under
    ``--json``, exit 2."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self.format_usage().strip())


def examples_epilog(*lines: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


class Out:
    def __init__(self, as_json: bool) -> None:
        self.json = as_json
        # Messages hold user data (paths, names): never read as rich markup.
        self.console = Console(highlight=False, markup=False)
        if not self.console.is_terminal:
            # Piped: tables not cut at 80 columns, and no sentence broken
            # across lines (scripts read them line by line).
            self.console = Console(highlight=False, markup=False, width=200, soft_wrap=True)
        self.err = Console(stderr=True, highlight=False, markup=False)

    def emit(self, data: Any, render: Callable[[], None]) -> None:
        if self.json:
            print(json.dumps(data, indent=2, sort_keys=True, default=str))
        else:
            render()

    def table(
        self, title: str | None, header: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> None:
        if title:  # a line of its own: a table's title is wrapped at the table's width
            self.console.print(Text(title))
        t = Table(box=box.SIMPLE_HEAD)
        for h in header:
            t.add_column(h)
        for r in rows:  # names are user data: never read as rich markup
            t.add_row(*(Text(str(x)) for x in r))
        self.console.print(t)

    def status(self, message: str) -> Any:
        """A spinner on stderr while long work runs (silent for JSON output)."""
        if self.json or not self.err.is_terminal:
            import contextlib

            return contextlib.nullcontext()
        return self.err.status(message)


def no_arguments(p: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    """A command that takes only the common options."""


@dataclass(frozen=True)
class Command:
    """One subcommand: its name, one sentence of help, examples for
    ``--help``, the function that runs it, and the function that declares
    its own arguments (given the parser of the options every command takes,
    for nested subcommands)."""

    name: str
    help: str
    examples: Sequence[str]
    run: Callable[[argparse.Namespace, Out], int]
    arguments: Callable[[argparse.ArgumentParser, argparse.ArgumentParser], None] = no_arguments


def iso_time(dt: datetime) -> str:
    return dt.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def warehouse_uri(args: argparse.Namespace, *, this_process_only: bool = False) -> str:
    """The catalog a command works on; with ``this_process_only`` (``serve``)
    it may be one that lives as long as the process (``memory://``)."""
    uri = args.warehouse or os.environ.get(ENV_WAREHOUSE)
    if not uri:
        raise CliError(f"no catalog given: pass --warehouse URI or set {ENV_WAREHOUSE}")
    if not this_process_only:
        lasting_uri(str(uri), "the catalog")
    return str(uri)


def lasting_uri(uri: str, what: str) -> str:
    """``uri``, unless it names storage that ends with the process.

    Raises:
        CliError: a ``memory://`` URI (each command is a process of its own:
            what it wrote there would be gone when it returns).
    """
    if uri.strip().lower().startswith("memory:"):
        raise CliError(
            f"{what} {uri!r} is in memory: it would be gone when this command exits "
            f"(give a folder or an s3:// URI)"
        )
    return uri


def storage_options(args: argparse.Namespace) -> dict[str, Any] | None:
    """The ``-o KEY=VALUE`` options: PyIceberg's ``s3.*`` keys or s3fs's own
    names (olympia.storage.options checks and converts them when the
    catalog is opened)."""
    opts: dict[str, Any] = {}
    for item in args.storage_option or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(f"--storage-option must be KEY=VALUE, got {item!r}")
        if opts.get(key, value) != value:
            raise CliError(f"-o {key} is given twice, as {opts[key]!r} and {value!r}")
        opts[key] = value
    return opts or None


def open_catalog(args: argparse.Namespace) -> Catalog:
    return olympia.load_catalog(warehouse_uri(args), storage_options(args))


def parse_time(text: str) -> datetime:
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise CliError(f"not a time: {text!r}; use ISO 8601, e.g. 2026-11-23T15:00:00Z") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def catalog_view(cat: Catalog, args: argparse.Namespace) -> CatalogVersion:
    if getattr(args, "version", None) is not None and getattr(args, "as_of", None):
        raise CliError("give --version or --as-of, not both")
    if getattr(args, "version", None) is not None:
        return cat.at_version(args.version)
    if getattr(args, "as_of", None):
        return cat.as_of(parse_time(args.as_of))
    return cat.latest()


def add_version_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("time travel")
    g.add_argument("--version", type=nonnegative_int, metavar="N", help="read version N")
    g.add_argument(
        "--as-of", metavar="TIME", help="read the last version at or before TIME (ISO 8601)"
    )


def nonnegative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a version number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"versions are >= 0, got {value}")
    return value


def positive_int(text: str) -> int:
    value = nonnegative_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def nonnegative_mib(text: str) -> int:
    """A whole number of MiB, 0 or more, for argparse (a usage error otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number of MiB: {text!r}") from None
    if not 0 <= value <= 2**40:
        raise argparse.ArgumentTypeError(f"MiB must be 0 to 2^40, got {value}")
    return value


def port_number(text: str) -> int:
    """A TCP port number, for argparse (a usage error otherwise)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} is not in 0-65535")
    return port


def iceberg_layer(
    args: argparse.Namespace,
    purpose: str = "this catalog has purged Iceberg tables, whose files only the Iceberg "
    "layer can delete",
) -> Any:
    """The Iceberg layer over the catalog of ``args`` (its purges, reading
    table and view metadata files)."""
    try:
        from olympia.iceberg.catalog import OlympiaCatalog, catalog_properties
    except ImportError as exc:  # the iceberg extra is not installed
        raise CliError(f"{purpose}; install olympia's iceberg extra: {exc}") from None
    try:
        properties = catalog_properties(storage_options(args) or {})
    except ValueError as exc:
        raise CliError(f"{purpose}, but: {exc}") from None
    return OlympiaCatalog(
        "olympia", warehouse=warehouse_uri(args), **{"create-catalog": "false", **properties}
    )


def absolute_location(location: str) -> str:
    """A relative folder as an absolute path (the server hands table
    locations to clients, which must not depend on its working folder).

    Raises:
        CliError: ``location`` is empty or white space (an unset shell
            variable: it would name the working folder).
    """
    if not location.strip():
        raise CliError(f"a location is empty ({location!r}): give a folder or a URI")
    if "://" in location or os.path.isabs(location):
        return location
    return os.path.abspath(location)


def positive_seconds(text: str) -> float:
    """A finite number of seconds above 0, for argparse (a usage error otherwise)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"seconds must be a finite number above 0, got {text}")
    return value
