"""``olympia serve``: the Iceberg REST server."""

from __future__ import annotations

import argparse
import sys

from olympia.cli.base import (
    EXIT_OK,
    CliError,
    Command,
    Out,
    absolute_location,
    nonnegative_mib,
    port_number,
    positive_int,
    positive_seconds,
    storage_options,
    warehouse_uri,
)
from olympia.store import DEFAULT_CACHE_BYTES


def cmd_serve(args: argparse.Namespace, out: Out) -> int:
    """Serve the catalog over the Iceberg REST protocol until interrupted (spec/rest.md)."""
    try:
        from olympia.rest.server import read_token, serve
    except ImportError as exc:  # the rest extra is not installed
        raise CliError(
            f"olympia serve needs the 'rest' extra (pip install 'olympia[rest]'): {exc}"
        ) from None
    try:
        token = read_token(args.token_file)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    from olympia.iceberg.catalog import catalog_properties

    warehouse = absolute_location(warehouse_uri(args, this_process_only=True))
    try:
        serve(
            warehouse,
            properties={
                **catalog_properties(storage_options(args) or {}),
                "cache-bytes": str(args.cache_mib * 1024 * 1024),
            },
            host=args.host,
            port=args.port,
            token=token,
            prefix=args.prefix,
            allowed_locations=[absolute_location(a) for a in args.allowed_location],
            allow_overlapping_locations=args.allow_overlapping_locations,
            transaction_idle_seconds=args.transaction_idle_seconds,
            max_open_transactions=args.max_open_transactions,
        )
    except ValueError as exc:  # PyIceberg's way to refuse a catalog property
        raise CliError(f"cannot serve {warehouse}: {exc}") from None
    except KeyboardInterrupt:  # Ctrl-C is how a server in a terminal is stopped
        sys.stderr.write("olympia serve: stopped\n")
    return EXIT_OK


def _serve_arguments(p: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=port_number, default=8181, help="port (default 8181)")
    p.add_argument(
        "--token-file",
        metavar="FILE",
        help="file whose first line is the bearer token clients must send "
        "(default: $OLYMPIA_TOKEN; neither: no authentication)",
    )
    p.add_argument("--prefix", default="olympia", help="URL prefix advertised in /v1/config")
    p.add_argument(
        "--allowed-location",
        action="append",
        default=[],
        metavar="URI",
        help="a location besides the warehouse where clients may put tables and views "
        "(repeatable; spec/rest.md §10)",
    )
    p.add_argument(
        "--allow-overlapping-locations",
        action="store_true",
        help="let one table's location or write.*.path lie inside another's",
    )
    p.add_argument(
        "--transaction-idle-seconds",
        type=positive_seconds,
        default=900.0,
        metavar="S",
        help="roll back a /txn transaction idle this long (default 900)",
    )
    p.add_argument(
        "--cache-mib",
        type=nonnegative_mib,
        default=DEFAULT_CACHE_BYTES // (1024 * 1024),
        metavar="N",
        help="memory the server keeps for catalog files it read, in MiB "
        f"(default {DEFAULT_CACHE_BYTES // (1024 * 1024)}; 0: none)",
    )
    p.add_argument(
        "--max-open-transactions",
        type=positive_int,
        default=1000,
        metavar="N",
        help="at most N /txn transactions open at once (default 1000)",
    )


SERVE = Command(
    "serve",
    "Serve the catalog over the Iceberg REST protocol (Spark, PyIceberg, any Iceberg engine).",
    [
        "olympia serve -w /data/lake",
        "olympia serve -w s3://bucket/lake --port 8181 --token-file /etc/olympia/token",
    ],
    cmd_serve,
    _serve_arguments,
)
