"""The ``olympia`` command line.

``olympia serve --warehouse URI [--host 127.0.0.1] [--port 8181] [--token-file F]``
serves the catalog over the Iceberg REST protocol (spec/rest.md). Further
subcommands register themselves in :func:`build_parser`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def _serve(args: argparse.Namespace) -> int:
    try:
        from olympia.rest.server import read_token, serve
    except ImportError as exc:  # the rest extra is not installed
        print(
            f"olympia serve needs the 'rest' extra (pip install 'olympia[rest]'): {exc}",
            file=sys.stderr,
        )
        return 2
    try:
        token = read_token(args.token_file)
    except ValueError as exc:
        print(f"olympia serve: {exc}", file=sys.stderr)
        return 2
    serve(args.warehouse, host=args.host, port=args.port, token=token, prefix=args.prefix)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="olympia", description="olympia lakehouse catalog")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="serve a catalog over the Iceberg REST protocol")
    serve.add_argument(
        "--warehouse", required=True, help="catalog URI: a path, file://, s3:// or memory://"
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8181, help="port (default 8181)")
    serve.add_argument(
        "--token-file",
        help="file whose first line is the bearer token clients must send "
        "(default: $OLYMPIA_TOKEN; neither: no authentication)",
    )
    serve.add_argument(
        "--prefix", default="olympia", help="the URL prefix advertised in /v1/config"
    )
    serve.set_defaults(run=_serve)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result: int = args.run(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
