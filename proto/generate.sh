#!/usr/bin/env bash
# Regenerates olympia/proto/*_pb2.py(i) from proto/*.proto.
# Needs the dev extra: pip install -e '.[dev]' (grpcio-tools bundles protoc).
set -euo pipefail
cd "$(dirname "$0")/.."
python -m grpc_tools.protoc --proto_path=olympia/proto=proto \
  --python_out=. --pyi_out=. proto/objects.proto proto/actions.proto
