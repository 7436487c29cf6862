from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from olympia.errors import CorruptCatalogError, InvalidNameError
from olympia.keys import KeyCodec, ObjectType, type_prefix, validate_name

CODEC = KeyCodec(namespace_max=16, table_max=24, view_max=24)

_name_chars = st.characters(
    blacklist_categories=("Cc", "Cs", "Cn", "Zs", "Zl", "Zp"),
    blacklist_characters="/\\",
)
names = st.text(_name_chars, min_size=1, max_size=16).filter(
    lambda s: ".." not in s and not any(c.isspace() for c in s)
)


def test_type_prefixes_are_four_base64_characters():
    assert type_prefix(ObjectType.NAMESPACE) == "AAAB"
    assert type_prefix(ObjectType.TABLE) == "AAAC"
    assert type_prefix(ObjectType.VIEW) == "AAAD"
    assert type_prefix(ObjectType.TRANSACTION) == "AAAE"


def test_table_key_layout():
    key = KeyCodec(8, 8, 8).table("ns1", "table1")
    assert key == "AAACns1     table1  "


@given(names, names)
def test_round_trip(ns, table):
    decoded = CODEC.decode(CODEC.table(ns, table))
    assert decoded.object_type is ObjectType.TABLE
    assert decoded.parts == (ns, table)
    assert CODEC.decode(CODEC.namespace(ns)).parts == (ns,)
    assert CODEC.decode(CODEC.view(ns, table)).parts == (ns, table)


@given(names, names, names, names)
def test_key_order_is_name_order(ns1, t1, ns2, t2):
    k1, k2 = CODEC.table(ns1, t1), CODEC.table(ns2, t2)
    assert (k1 < k2) == ((ns1, t1) < (ns2, t2))
    assert (k1.encode() < k2.encode()) == (k1 < k2)  # UTF-8 byte order agrees


@given(names, names, names)
def test_tables_of_a_namespace_share_its_prefix(ns, other, table):
    prefix = CODEC.tables_prefix(ns)
    assert CODEC.table(ns, table).startswith(prefix)
    assert CODEC.table(other, table).startswith(prefix) == (ns == other)


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("", "empty"),
        ("x" * 17, "17 characters"),
        ("a b", "forbidden character"),
        ("a\tb", "forbidden character"),
        ("a\x00", "forbidden character"),
        ("a/b", "forbidden character"),
        ("a\\b", "forbidden character"),
        ("..", "'..'"),
        ("a..b", "'..'"),
        ("a\u2028", "forbidden character"),
    ],
)
def test_bad_names_are_refused(name, reason):
    with pytest.raises(InvalidNameError, match=reason):
        validate_name("table", name, 16)


def test_non_string_name_is_refused():
    with pytest.raises(InvalidNameError, match="must be a string"):
        CODEC.namespace(42)  # type: ignore[arg-type]


def test_transaction_ids():
    assert CODEC.decode(CODEC.transaction("abc_DEF-1")).parts == ("abc_DEF-1",)
    with pytest.raises(InvalidNameError):
        CODEC.transaction("a/b")


def test_decode_rejects_garbage():
    with pytest.raises(CorruptCatalogError, match="unknown type prefix"):
        CODEC.decode("ZZZZabc")
    with pytest.raises(CorruptCatalogError, match="wrong length"):
        CODEC.decode("AAACabc")
