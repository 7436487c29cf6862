"""Row filters in words (olympia/iceberg/expressions.py): every kind of
PyIceberg expression, bound or unbound, as SQL-like text that PyIceberg's own
parser reads back; and the conflict messages that name a filter use it."""

from __future__ import annotations

import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from iceberg_helpers import olympia_catalog
from pyiceberg.expressions import (
    AlwaysFalse,
    AlwaysTrue,
    And,
    BooleanExpression,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNaN,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    NotEqualTo,
    NotIn,
    NotNaN,
    NotNull,
    NotStartsWith,
    Or,
    StartsWith,
)
from pyiceberg.expressions.parser import parse
from pyiceberg.expressions.visitors import bind
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
    TimeType,
    UUIDType,
)

from olympia.errors import CommitConflictError
from olympia.iceberg.expressions import to_sql

SCHEMA = Schema(
    NestedField(1, "customer_id", LongType()),
    NestedField(2, "region", StringType()),
    NestedField(3, "price", DoubleType()),
    NestedField(4, "day", DateType()),
    NestedField(5, "at", TimestampType()),
    NestedField(6, "ok", BooleanType()),
    NestedField(7, "amount", DecimalType(10, 2)),
    NestedField(8, "id", UUIDType()),
    NestedField(9, "blob", BinaryType()),
    NestedField(10, "clock", TimeType()),
)

UNBOUND: list[tuple[BooleanExpression, str]] = [
    (AlwaysTrue(), "true"),
    (AlwaysFalse(), "false"),
    (EqualTo("region", "eu"), "region = 'eu'"),
    (NotEqualTo("region", "it's"), "region != 'it''s'"),
    (LessThan("customer_id", 5), "customer_id < 5"),
    (LessThanOrEqual("customer_id", -5), "customer_id <= -5"),
    (GreaterThan("price", 1.5), "price > 1.5"),
    (GreaterThanOrEqual("customer_id", 100), "customer_id >= 100"),
    (IsNull("region"), "region IS NULL"),
    (NotNull("region"), "region IS NOT NULL"),
    (IsNaN("price"), "price IS NaN"),
    (NotNaN("price"), "price IS NOT NaN"),
    (In("customer_id", [10, 2, 3]), "customer_id IN (2, 3, 10)"),
    (NotIn("region", ["us", "eu"]), "region NOT IN ('eu', 'us')"),
    (StartsWith("region", "e"), "region LIKE 'e%'"),
    (NotStartsWith("region", "e"), "region NOT LIKE 'e%'"),
    (
        And(GreaterThanOrEqual("customer_id", 100), EqualTo("region", "eu")),
        "customer_id >= 100 AND region = 'eu'",
    ),
    (
        And(EqualTo("region", "eu"), And(GreaterThan("price", 1.0), NotNull("day"))),
        "region = 'eu' AND price > 1.0 AND day IS NOT NULL",
    ),
    (
        Or(EqualTo("region", "eu"), And(EqualTo("region", "us"), LessThan("customer_id", 9))),
        "region = 'eu' OR (region = 'us' AND customer_id < 9)",
    ),
    (
        And(Or(EqualTo("region", "eu"), IsNull("region")), GreaterThan("customer_id", 1)),
        "(region = 'eu' OR region IS NULL) AND customer_id > 1",
    ),
    (Not(EqualTo("region", "eu")), "NOT (region = 'eu')"),
    (Not(Or(IsNull("region"), EqualTo("ok", True))), "NOT (region IS NULL OR ok = true)"),
    (EqualTo("null", "x"), "\"null\" = 'x'"),  # a keyword of the syntax, as a column name
    (EqualTo("my col", 1), '"my col" = 1'),
    (EqualTo("a.b", 1), "a.b = 1"),
]


@pytest.mark.parametrize(("expression", "text"), UNBOUND, ids=[t for _, t in UNBOUND])
def test_unbound_expressions_in_words(expression: BooleanExpression, text: str) -> None:
    rendered = to_sql(expression)
    assert rendered == text
    assert parse(rendered) == expression  # PyIceberg reads the words back


@pytest.mark.parametrize(
    ("expression", "text"),
    [
        (
            And(GreaterThanOrEqual("customer_id", 100), EqualTo("region", "eu")),
            "customer_id >= 100 AND region = 'eu'",
        ),
        (EqualTo("day", "2026-11-26"), "day = DATE '2026-11-26'"),
        (LessThan("at", "2026-11-26T12:30:00"), "at < TIMESTAMP '2026-11-26T12:30:00'"),
        (EqualTo("clock", "12:30:00"), "clock = TIME '12:30:00'"),
        (EqualTo("amount", Decimal("12.50")), "amount = 12.50"),
        (
            EqualTo("id", uuid.UUID("12345678-1234-5678-1234-567812345678")),
            "id = UUID '12345678-1234-5678-1234-567812345678'",
        ),
        (EqualTo("blob", b"\x01\xff"), "blob = X'01ff'"),
        (In("customer_id", [3, 1, 2]), "customer_id IN (1, 2, 3)"),
        (NotIn("region", ["b", "a"]), "region NOT IN ('a', 'b')"),
        (IsNull("region"), "region IS NULL"),
        (NotNaN("price"), "price IS NOT NaN"),
        (StartsWith("region", "50%"), "region LIKE '50\\%%'"),
        (Not(EqualTo("ok", True)), "NOT (ok = true)"),
        (Or(EqualTo("region", "eu"), IsNull("region")), "region = 'eu' OR region IS NULL"),
    ],
)
def test_bound_expressions_in_words(expression: BooleanExpression, text: str) -> None:
    bound = bind(SCHEMA, expression, case_sensitive=True)
    assert to_sql(bound) == text
    assert "Bound" not in to_sql(bound) and "term=" not in to_sql(bound)


def test_pythons_reprs_are_what_this_replaces() -> None:
    # the reason for the module: str() of a filter is a Python repr
    expression = And(GreaterThanOrEqual("customer_id", 100), EqualTo("region", "eu"))
    assert "Reference(" in str(expression)
    assert "Reference(" not in to_sql(expression)


# --- the messages of refused commits ----------------------------------------------------

ORDERS = pa.schema([("customer_id", pa.int64()), ("region", pa.string())])


def orders(*rows: tuple[int, str]) -> pa.Table:
    return pa.Table.from_pylist([{"customer_id": c, "region": r} for c, r in rows], schema=ORDERS)


@pytest.fixture
def catalog(tmp_path: Path) -> Any:
    cat = olympia_catalog(str(tmp_path / "lake"))
    cat.create_namespace("shop")
    cat.create_table("shop.orders", ORDERS).append(orders((1, "eu"), (200, "us")))
    cat.create_table("shop.report", ORDERS)
    return cat


def test_a_refused_scan_names_its_filter_in_words(catalog: Any) -> None:
    report = catalog.begin("serializable")
    read = (
        report.load_table("shop.orders")
        .scan(row_filter="customer_id >= 100 AND region = 'eu'")
        .to_arrow()
    )
    report.load_table("shop.report").append(read)
    catalog.load_table("shop.orders").append(orders((150, "eu")))  # what it read changed
    with pytest.raises(CommitConflictError) as refused:
        report.commit()
    message = str(refused.value)
    assert refused.value.rule == "scan-filter-matches", message
    assert "can match the filter customer_id >= 100 AND region = 'eu' of a scan" in message
    for python in ("Reference(", "term=", "Literal(", "GreaterThanOrEqual"):
        assert python not in message, message


def test_a_refused_delete_names_its_filter_in_words(catalog: Any) -> None:
    cleanup = catalog.begin("serializable")
    cleanup.load_table("shop.orders").delete("region = 'eu' AND customer_id < 100")
    catalog.load_table("shop.orders").append(orders((5, "eu")))  # would have been deleted
    with pytest.raises(CommitConflictError) as refused:
        cleanup.commit()
    message = str(refused.value)
    assert "region = 'eu' AND customer_id < 100" in message, message
    assert "Reference(" not in message and "term=" not in message, message
