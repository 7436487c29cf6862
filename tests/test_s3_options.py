"""One S3 vocabulary everywhere (olympia/storage/options.py): PyIceberg's
``s3.*`` keys and s3fs's own names open the same catalog on the moto server
through Python, the command line, ``olympia serve`` and the PyIceberg plugin;
conflicting, unknown and unsupported keys are refused with a message naming
them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import olympia
from olympia import cli
from olympia.storage.options import pyiceberg_properties, s3fs_options
from olympia.storage.s3 import S3Storage

pytest.importorskip("s3fs")


def pyiceberg_keys(moto: Any) -> dict[str, str]:
    """The moto server's settings in PyIceberg's vocabulary."""
    return {
        "s3.endpoint": moto.endpoint_url,
        "s3.region": "us-east-1",
        "s3.access-key-id": "testing",
        "s3.secret-access-key": "testing",
    }


def cli_options(options: dict[str, str]) -> list[str]:
    return [arg for key, value in options.items() for arg in ("-o", f"{key}={value}")]


@pytest.fixture
def lake(moto_server: Any, request: pytest.FixtureRequest) -> str:
    """A catalog on moto (made with s3fs's names) holding namespace ``sales``."""
    uri, fsspec_options = moto_server.location(request.node.name)
    cat = olympia.create_catalog(uri, fsspec_options)
    with cat.transaction() as txn:
        txn.create_namespace("sales", {"owner": "ops"})
    return uri


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        code = cli.main(list(args))
    except SystemExit as exc:  # how the command line fails
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


# --- the same catalog, every way in -------------------------------------------------


def test_python_takes_pyiceberg_keys(lake: str, moto_server: Any) -> None:
    cat = olympia.load_catalog(lake, pyiceberg_keys(moto_server))
    assert cat.latest().list_namespaces() == ["sales"]
    storage = cat.store.storage
    assert storage._options["endpoint_url"] == moto_server.endpoint_url  # type: ignore[attr-defined]


def test_export_snapshot_takes_pyiceberg_keys(lake: str, moto_server: Any) -> None:
    keys = pyiceberg_keys(moto_server)
    target, _ = moto_server.location("export-target")
    olympia.load_catalog(lake, keys).export_snapshot(
        "e1", target, mode="full", storage_options=keys
    )
    assert olympia.load_catalog(target, keys).latest().list_namespaces() == ["sales"]


def test_cli_takes_pyiceberg_keys(
    lake: str, moto_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    options = cli_options(pyiceberg_keys(moto_server))
    code, out, err = run_cli(capsys, "ls", "-w", lake, *options, "--json")
    assert code == 0, err
    assert [ns["name"] for ns in json.loads(out)["namespaces"]] == ["sales"]


def test_cli_still_takes_s3fs_names_and_a_mix(
    lake: str, moto_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    mixed = {
        "endpoint_url": moto_server.endpoint_url,
        "key": "testing",
        "secret": "testing",
        "s3.region": "us-east-1",
    }
    code, out, err = run_cli(capsys, "ls", "-w", lake, *cli_options(mixed), "--json")
    assert code == 0, err
    assert [ns["name"] for ns in json.loads(out)["namespaces"]] == ["sales"]
    # and in Python, with s3fs's nested client_kwargs
    assert olympia.load_catalog(lake, moto_server.storage_options).latest().list_namespaces() == [
        "sales"
    ]


def test_serve_takes_pyiceberg_keys(lake: str, moto_server: Any, tmp_path: Path) -> None:
    pytest.importorskip("fastapi")
    from pyiceberg.catalog import load_catalog
    from rest_helpers import olympia_serve

    options = cli_options(pyiceberg_keys(moto_server))
    with olympia_serve(tmp_path, lake, *options) as uri:
        rest = load_catalog("rest", **{"type": "rest", "uri": uri})
        assert rest.list_namespaces() == [("sales",)]
        assert rest.load_namespace_properties("sales") == {"owner": "ops"}


def test_serve_refuses_an_unknown_key(lake: str, tmp_path: Path) -> None:
    pytest.importorskip("fastapi")
    command = [sys.executable, "-m", "olympia.cli", "serve", "-w", lake, "--port", "1"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    res = subprocess.run(
        [*command, "-o", "s3.endpiont=http://127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert res.returncode == 2, res.stderr
    assert "s3.endpiont" in res.stderr and "s3.endpoint" in res.stderr
    assert "Traceback" not in res.stderr


def test_pyiceberg_plugin_passes_every_supported_key_to_the_catalog_storage(
    lake: str, moto_server: Any
) -> None:
    from pyiceberg.catalog import load_catalog

    catalog: Any = load_catalog(
        "lake",
        **{
            "py-catalog-impl": "olympia.iceberg.OlympiaCatalog",
            "warehouse": lake,
            "create-catalog": "false",
            **pyiceberg_keys(moto_server),
            "s3.path-style-access": "true",
            "s3.connect-timeout": "7.5",
        },
    )
    assert catalog.list_namespaces() == [("sales",)]
    options = catalog.olympia.store.storage._options
    assert options["config_kwargs"]["s3"] == {"addressing_style": "path"}
    assert options["config_kwargs"]["connect_timeout"] == 7.5
    assert options["config_kwargs"]["max_pool_connections"] == 128


def test_pyiceberg_plugin_refuses_a_misspelt_key(lake: str, moto_server: Any) -> None:
    from pyiceberg.catalog import load_catalog

    with pytest.raises(ValueError, match=r"'s3\.endpiont'.*did you mean 's3\.endpoint'"):
        load_catalog(
            "lake",
            **{
                "py-catalog-impl": "olympia.iceberg.OlympiaCatalog",
                "warehouse": lake,
                **pyiceberg_keys(moto_server),
                "s3.endpiont": moto_server.endpoint_url,
            },
        )


# --- refusals ------------------------------------------------------------------------


def test_conflicting_keys_are_refused_naming_both(
    lake: str, moto_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    keys = {**pyiceberg_keys(moto_server), "endpoint_url": "http://127.0.0.1:1"}
    with pytest.raises(olympia.InvalidArgumentError, match=r"'s3\.endpoint' and 'endpoint_url'"):
        olympia.load_catalog(lake, keys)
    region = {**pyiceberg_keys(moto_server), "client_kwargs": {"region_name": "eu-west-1"}}
    with pytest.raises(olympia.InvalidArgumentError, match=r"'s3\.region' and .client_kwargs"):
        olympia.load_catalog(lake, region)
    code, _, err = run_cli(capsys, "ls", "-w", lake, *cli_options(keys))
    assert code == 2
    assert "'s3.endpoint' and 'endpoint_url' disagree" in err and "Traceback" not in err
    # the same setting given twice with one value is no conflict
    same = {**pyiceberg_keys(moto_server), "endpoint_url": moto_server.endpoint_url}
    assert olympia.load_catalog(lake, same).latest().list_namespaces() == ["sales"]


def test_unknown_keys_are_refused_naming_them(
    lake: str, moto_server: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    typo = {**pyiceberg_keys(moto_server), "s3.endpiont": "http://127.0.0.1:1"}
    with pytest.raises(olympia.InvalidArgumentError, match=r"'s3\.endpiont'.*'s3\.endpoint'"):
        olympia.load_catalog(lake, typo)
    code, _, err = run_cli(capsys, "ls", "-w", lake, *cli_options(typo))
    assert code == 2 and "unknown storage option 's3.endpiont'" in err
    # an s3fs name s3fs does not take is a typo too
    plain = {**moto_server.storage_options, "endpiont_url": "http://127.0.0.1:1"}
    with pytest.raises(olympia.InvalidArgumentError, match=r"'endpiont_url'.*'endpoint_url'"):
        olympia.load_catalog(lake, plain)
    # checked for every location, not only S3
    local = str(tmp_path / "local")
    with pytest.raises(olympia.InvalidArgumentError, match=r"s3\.regoin"):
        olympia.create_catalog(local, {"s3.regoin": "eu-west-1"})


def test_unsupported_pyiceberg_keys_are_refused(lake: str, moto_server: Any) -> None:
    keys = {**pyiceberg_keys(moto_server), "s3.role-arn": "arn:aws:iam::1:role/x"}
    with pytest.raises(olympia.InvalidArgumentError, match=r"'s3\.role-arn'.*not supported"):
        olympia.load_catalog(lake, keys)


def test_bad_values_are_refused(moto_server: Any) -> None:
    with pytest.raises(olympia.InvalidArgumentError, match=r"'s3\.connect-timeout'.*number"):
        s3fs_options({"s3.connect-timeout": "soon"})
    with pytest.raises(olympia.InvalidArgumentError, match=r"'s3\.anonymous'.*true or false"):
        s3fs_options({"s3.anonymous": "perhaps"})
    with pytest.raises(olympia.InvalidArgumentError, match=r"'use_ssl'.*true or false"):
        s3fs_options({"use_ssl": "maybe"})
    with pytest.raises(
        olympia.InvalidArgumentError, match=r"'s3\.force-virtual-addressing' and 's3\.path-style"
    ):
        s3fs_options({"s3.force-virtual-addressing": "true", "s3.path-style-access": "true"})


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"endpoint_url": 5}, r"'endpoint_url' must be non-empty text"),
        ({"key": 1}, r"'key' must be non-empty text"),
        ({"secret": b"x"}, r"'secret' must be non-empty text"),
        ({"client_kwargs": "x"}, r"'client_kwargs' must be a mapping"),
        ({"config_kwargs": ["x"]}, r"'config_kwargs' must be a mapping"),
        ({"config_kwargs": {"bogus": 1}}, r"'config_kwargs' holds \['bogus'\]"),
    ],
)
def test_s3fs_names_of_the_wrong_kind_are_refused_before_any_request(
    options: dict[str, Any], message: str, tmp_path: Path, moto_server: Any
) -> None:
    """Given under s3fs's own names, a value of the wrong kind used to reach
    s3fs and fail at the first request without naming the option (or to be
    ignored by a local catalog)."""
    with pytest.raises(olympia.InvalidArgumentError, match=message):
        s3fs_options(options)
    for uri in (moto_server.location("kind")[0], str(tmp_path / "local")):
        with pytest.raises(olympia.InvalidArgumentError, match=message):
            olympia.create_catalog(uri, {**moto_server.storage_options, **options})
    assert s3fs_options({"config_kwargs": {"read_timeout": 3}}) == {
        "config_kwargs": {"read_timeout": 3}
    }


# --- the mapping itself --------------------------------------------------------------


def test_text_from_a_command_line_becomes_what_s3fs_needs() -> None:
    assert s3fs_options(
        {
            "s3.endpoint": "http://minio:9000",
            "s3.access-key-id": "k",
            "s3.secret-access-key": "s",
            "s3.session-token": "t",
            "s3.region": "eu-west-1",
            "s3.anonymous": "false",
            "s3.path-style-access": "true",
            "s3.connect-timeout": "5",
            "s3.request-timeout": "30",
            "s3.proxy-uri": "http://proxy:3128",
            "s3.server-side-encryption": "aws:kms",
            "s3.sse-kms-key-id": "kms-1",
            "use_ssl": "false",
            "max_concurrency": "4",
        }
    ) == {
        "endpoint_url": "http://minio:9000",
        "key": "k",
        "secret": "s",
        "token": "t",
        "client_kwargs": {"region_name": "eu-west-1"},
        "anon": False,
        "config_kwargs": {
            "s3": {"addressing_style": "path"},
            "connect_timeout": 5.0,
            "read_timeout": 30.0,
            "proxies": {"http": "http://proxy:3128", "https": "http://proxy:3128"},
        },
        "s3_additional_kwargs": {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": "kms-1"},
        "use_ssl": False,
        "max_concurrency": 4,
    }
    # PyIceberg's client.* fall-backs, used only where the s3.* key is absent
    assert s3fs_options({"client.region": "us-west-2", "client.access-key-id": "a"}) == {
        "client_kwargs": {"region_name": "us-west-2"},
        "key": "a",
    }
    assert s3fs_options({"client.region": "us-west-2", "s3.region": "eu-west-1"}) == {
        "client_kwargs": {"region_name": "eu-west-1"}
    }


def test_pyiceberg_properties_is_the_inverse() -> None:
    fsspec = {
        "endpoint_url": "http://minio:9000",
        "key": "k",
        "secret": "s",
        "client_kwargs": {"region_name": "eu-west-1"},
        "config_kwargs": {"s3": {"addressing_style": "path"}},
    }
    properties = {
        "s3.endpoint": "http://minio:9000",
        "s3.access-key-id": "k",
        "s3.secret-access-key": "s",
        "s3.region": "eu-west-1",
        "s3.path-style-access": "true",
    }
    assert pyiceberg_properties(fsspec) == properties
    assert pyiceberg_properties(properties) == properties
    assert s3fs_options(pyiceberg_properties(fsspec)) == fsspec
    with pytest.raises(olympia.InvalidArgumentError, match=r"'use_ssl' has no PyIceberg property"):
        pyiceberg_properties({"use_ssl": False})


def test_an_endpoint_that_never_answers_fails_a_read_after_a_few_attempts() -> None:
    """An S3 endpoint that takes connections and never answers: each read
    used to be tried 125 times (s3fs's two retry loops of 5 around
    botocore's attempts), minutes to hours with the usual timeouts. Now a
    few (2 x 2 x 3, and the connections botocore opens again on a timeout:
    16 here), then StorageError naming the file."""
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(256)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            held.append(conn)  # never answered

    threading.Thread(target=accept, daemon=True).start()
    endpoint = f"http://127.0.0.1:{listener.getsockname()[1]}"
    options = {
        "s3.endpoint": endpoint,
        "s3.access-key-id": "testing",
        "s3.secret-access-key": "testing",
        "s3.region": "us-east-1",
        "s3.connect-timeout": "0.2",
        "s3.request-timeout": "0.2",
    }
    try:
        storage = S3Storage("silent/catalog", options)
        with pytest.raises(olympia.StorageError, match="vn/latest"):
            storage.read("vn/latest")
        assert 1 <= len(held) <= 20
    finally:
        listener.close()
        for conn in held:
            conn.close()


@pytest.mark.parametrize(
    ("given", "meant"),
    [
        ("region", "s3.region"),
        ("endpoint", "s3.endpoint"),
        ("access_key_id", "s3.access-key-id"),
        ("cache_regionz", "cache_regions"),
    ],
)
def test_an_unknown_option_suggests_the_name_meant(given: str, meant: str) -> None:
    """``region`` suggested s3fs's ``cache_regions``; PyIceberg's
    ``s3.region`` is what a user of these names means."""
    with pytest.raises(olympia.InvalidArgumentError, match=f"did you mean '{meant}'"):
        olympia.load_catalog("s3://bucket/x", storage_options={given: "x"})
