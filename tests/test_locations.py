"""What the location policy accepts is what PyIceberg's FileIO touches
(olympia.iceberg.locations; spec/rest.md §10, "Locations")."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pyiceberg.io.pyarrow import PyArrowFileIO

from olympia.iceberg.locations import LocationNotAllowedError, LocationPolicy, normalize

ACCEPTED = [
    ("/data/lake/t", "file:///data/lake/t"),
    ("file:/data/lake/t/", "file:///data/lake/t"),
    ("FILE:/data/lake/t", "file:///data/lake/t"),
    ("file:///data//lake/t", "file:///data/lake/t"),
    ("File:///data/lake/t", "file:///data/lake/t"),
    ("s3://bucket/lake/t", "s3://bucket/lake/t"),
    ("s3a://bucket/lake/t/", "s3://bucket/lake/t"),
    ("S3N://bucket/lake", "s3://bucket/lake"),
    ("s3://bucket", "s3://bucket"),
    ("gs://bucket/lake", "gs://bucket/lake"),
    ("hdfs://namenode/lake//t", "hdfs://namenode/lake/t"),
    ("hdfs:///lake/t", "hdfs:///lake/t"),
    ("/data/my lake/t", "file:///data/my lake/t"),  # white space inside a path is a name
]

REFUSED = [
    ("", "is empty"),
    (" ", "is empty"),
    (" /data/lake/t", "begins or ends with white space"),
    ("\t/data/lake/t", "begins or ends with white space"),
    ("/data/lake/t\n", "begins or ends with white space"),
    ("s3://bucket/lake/t ", "begins or ends with white space"),
    ("\u00a0s3://bucket/lake", "begins or ends with white space"),
    ("/data/la\x7fke\x01/t", "control character"),
    ("lake/t", "is relative"),
    ("file:lake/t", "is relative"),
    ("file://tmp/lake/t", "names a host ('tmp')"),
    ("file://localhost/data/lake", "names a host ('localhost')"),
    ("file:///", "names the root"),
    ("s3://", "names the root"),
    ("s3:///bucket/lake", "empty bucket or an empty segment"),
    ("s3://bucket/lake//t", "empty bucket or an empty segment"),
    ("gs://bucket//lake", "empty bucket or an empty segment"),
    ("file:///data/../etc", "'.' or '..' segment"),
    ("s3://bucket/./t", "'.' or '..' segment"),
    ("s3://../t", "'.' or '..' segment"),
    ("ftp://host/lake", "scheme 'ftp'"),
    ("/data/la\\ke", "backslash"),
    ("file:///data/lake/t#1", "'?' or '#'"),
    ("s3://bucket/lake/q?x", "'?' or '#'"),
    ("/data/lake/t#1", "'?' or '#'"),
]


@pytest.mark.parametrize(("location", "normal"), ACCEPTED)
def test_accepted_locations_have_one_normal_form(location: str, normal: str) -> None:
    assert normalize(location) == normal
    assert normalize(normal) == normal


@pytest.mark.parametrize(("location", "message"), REFUSED)
def test_refused_locations_name_the_rule(location: str, message: str) -> None:
    with pytest.raises(LocationNotAllowedError, match="location") as info:
        normalize(location)
    assert message in str(info.value)


@pytest.mark.parametrize(
    "location",
    [loc for loc, _ in ACCEPTED if loc.lower().startswith(("/", "file:", "s3"))],
)
def test_what_is_accepted_is_what_the_file_io_touches(location: str) -> None:
    """Every file or S3 location the policy accepts is, to PyIceberg's
    FileIO, the path of its normal form: never a path relative to the
    working directory, another bucket or another key."""
    normal = normalize(location)
    _, netloc, path = PyArrowFileIO.parse_location(location)
    _, normal_netloc, normal_path = PyArrowFileIO.parse_location(normal)
    if normal.startswith("file://"):
        assert netloc == "" and os.path.isabs(path)
        assert os.path.normpath(path) == os.path.normpath(normal_path)
    else:
        assert (netloc, path.rstrip("/")) == (normal_netloc, normal_path)


def test_a_root_with_a_host_is_refused_and_a_location_with_one_too(tmp_path: Path) -> None:
    with pytest.raises(LocationNotAllowedError, match="names a host"):
        LocationPolicy([f"file://host{tmp_path}"])
    policy = LocationPolicy([f"file://{tmp_path}"])
    assert policy.check(f"file://{tmp_path}/t", "t") == f"file://{tmp_path}/t"
    with pytest.raises(LocationNotAllowedError, match="names a host"):
        policy.check(f"file:/{tmp_path}/t", "a table's location")
