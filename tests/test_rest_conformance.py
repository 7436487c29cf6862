"""The REST server against the Iceberg REST OpenAPI specification, with schemathesis.

``schemathesis run`` (a child process) loads ``../shared/iceberg-rest/rest-catalog-open-api.yaml``
(35 operations) and sends generated requests, valid and invalid, to a real
server over HTTP: one started here on a free port of 127.0.0.1, over a fresh
warehouse, with bearer-token authentication on. All four phases run
(examples, coverage, fuzzing, stateful), with a fixed seed and a bounded
number of examples per operation; the coverage phase against an empty
catalog, the others against one that holds the objects the specification's
examples name. The run passes only when no response is a
5xx, every response matches the specification (status code, content type,
headers, body schema), invalid requests are refused, and requests without the
token, or with a wrong one, are refused with 401 (schemathesis's
``ignored_auth`` check, and an explicit sweep over every operation below).

Every path has ``{prefix}``: the server serves one (advertised in
``/v1/config``), pinned here through the run's configuration file.

One check is left out, ``positive_data_acceptance`` (every schema-valid
request must succeed): the server refuses, with 400, names the specification
allows but olympia does not (empty, control characters, ``.`` in a namespace
level; spec/rest.md §5) and requests that are well formed but make no sense
for the catalog (an update naming a snapshot that does not exist). Both are
the answers the specification documents for such requests.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest
import requests
import yaml
from pyiceberg.catalog import load_catalog
from pyiceberg.view.metadata import SQLViewRepresentation, ViewVersion
from rest_helpers import PREFIX, olympia_serve

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT.parent / "shared" / "iceberg-rest" / "rest-catalog-open-api.yaml"
TOKEN = "conformance-token"
OPERATIONS = 35
MAX_EXAMPLES = 10
SEED = 20261123
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")

pytestmark = pytest.mark.skipif(
    not SPEC.exists(),
    reason=(
        f"the Iceberg REST OpenAPI file is not at {SPEC}: it comes with the project's "
        f"shared material (../shared beside the checkout, as CI has it; the file is "
        f"open-api/rest-catalog-open-api.yaml of Apache Iceberg)"
    ),
)


@dataclass(frozen=True)
class Server:
    """An ``olympia serve`` process on a free port of 127.0.0.1."""

    uri: str
    warehouse: str


@contextmanager
def _olympia_serve(folder: Path) -> Iterator[Server]:
    """``olympia serve`` with a token file, over a fresh warehouse in ``folder``."""
    token_file = folder / "token"
    token_file.write_text(TOKEN + "\n")
    warehouse = f"file://{folder}/warehouse"
    options = ("--token-file", str(token_file), "--prefix", PREFIX)
    with olympia_serve(folder, warehouse, *options) as uri:
        yield Server(uri, warehouse)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server with authentication on, over a warehouse that holds the
    objects the specification's examples name (namespaces ``accounting`` and
    ``accounting.tax``, table ``accounting.tax.sales``, view
    ``accounting.sales``), so that generated requests reach more than 404s."""
    with _olympia_serve(tmp_path_factory.mktemp("conformance")) as s:
        rest = load_catalog("seed", type="rest", uri=s.uri, token=TOKEN)
        rest.create_namespace(("accounting",))
        rest.create_namespace(("accounting", "tax"))
        schema = pa.schema([pa.field("id", pa.int64()), pa.field("region", pa.string())])
        table = rest.create_table(("accounting", "tax", "sales"), schema)
        table.append(pa.table({"id": [1, 2], "region": ["eu", "us"]}, schema=schema))
        version = ViewVersion(
            version_id=1,
            schema_id=0,
            timestamp_ms=1,
            representations=[
                SQLViewRepresentation(type="sql", sql="SELECT 1 AS id", dialect="spark")
            ],
            default_namespace=("accounting",),
        )
        rest.create_view(("accounting", "sales"), table.schema(), version)
        yield s


def _operations() -> list[tuple[str, str]]:
    spec = yaml.safe_load(SPEC.read_text())
    return [
        (method.upper(), path)
        for path, item in spec["paths"].items()
        for method in item
        if method in METHODS
    ]


def test_the_specification_has_35_operations_all_under_one_prefix() -> None:
    operations = _operations()
    assert len(operations) == OPERATIONS
    outside = [p for _, p in operations if not p.startswith("/v1/{prefix}/")]
    assert sorted(set(outside)) == ["/v1/config", "/v1/oauth/tokens"]


def test_config_advertises_the_prefix(served: Server) -> None:
    response = requests.get(
        f"{served.uri}/v1/config", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10
    )
    assert response.status_code == 200
    assert response.json()["overrides"]["prefix"] == PREFIX


def _concrete(path: str) -> str:
    values = {"prefix": PREFIX, "namespace": "accounting\x1ftax", "table": "sales"}
    return re.sub(r"\{([^}]+)\}", lambda m: values.get(m.group(1), "x"), path)


@pytest.mark.parametrize("header", [None, "Bearer wrong-token", f"Basic {TOKEN}", TOKEN])
def test_every_operation_without_the_token_gets_401(served: Server, header: str | None) -> None:
    headers = {} if header is None else {"Authorization": header}
    for method, path in _operations():
        url = served.uri + _concrete(path).replace("\x1f", "%1F")
        response = requests.request(method, url, headers=headers, json={}, timeout=10)
        assert response.status_code == 401, (method, path, response.status_code)
        if method == "HEAD":
            continue
        body = response.json()
        if path == "/v1/oauth/tokens":  # its errors are OAuth errors (OAuthError)
            assert body["error"] == "invalid_client"
        else:
            assert body["error"]["type"] == "NotAuthorizedException"
            assert body["error"]["code"] == 401


@pytest.fixture(scope="module")
def empty(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server with authentication on, over an empty warehouse."""
    with _olympia_serve(tmp_path_factory.mktemp("conformance-empty")) as s:
        yield s


# (catalog, phases): the coverage phase (boundary and invalid values of every
# parameter and body property, several thousand requests, not bounded by
# --max-examples) runs against the empty catalog, where it takes about a
# minute; against the seeded one every accepted commit writes metadata and it
# takes over ten. The other phases run against the seeded catalog.
RUNS = {"seeded": "examples,fuzzing,stateful", "empty": "coverage"}


@pytest.mark.timeout(900)
@pytest.mark.parametrize("catalog", list(RUNS))
def test_schemathesis_finds_no_failure(
    catalog: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    target: Server = request.getfixturevalue("served" if catalog == "seeded" else "empty")
    phases = RUNS[catalog]
    config = tmp_path / "schemathesis.toml"
    config.write_text(f'[parameters]\n"path.prefix" = "{PREFIX}"\n')
    command = [
        str(Path(sys.executable).parent / "schemathesis"),
        "--config-file",
        str(config),
        "run",
        str(SPEC),
        "--url",
        target.uri,
        "--header",
        f"Authorization: Bearer {TOKEN}",
        "--phases",
        phases,
        "--checks",
        "all",
        "--exclude-checks",
        "positive_data_acceptance",
        "--max-examples",
        str(MAX_EXAMPLES),
        "--seed",
        str(SEED),
        "--workers",
        "1",
        "--generation-database",
        "none",
        "--request-timeout",
        "60",
        "--no-color",
    ]
    run = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=850)
    output = run.stdout + run.stderr
    summary = output[output.rfind("SUMMARY") :] if "SUMMARY" in output else output[-4000:]
    assert run.returncode == 0, f"schemathesis found failures:\n{output[-20000:]}"
    assert f"Selected: {OPERATIONS}/{OPERATIONS}" in summary, summary
    assert f"Tested: {OPERATIONS}" in summary, summary
    for phase in ("Examples", "Coverage", "Fuzzing", "Stateful"):
        ran = phase.lower() in phases
        assert (f"✅ {phase}" in summary) == ran, summary
    assert re.search(r"(\d+) generated, \1 passed", summary), summary
    print(summary)
