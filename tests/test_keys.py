from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from olympia.errors import CorruptCatalogError, InvalidNameError
from olympia.keys import KeyCodec, ObjectType, type_prefix, validate_name

CODEC = KeyCodec(namespace_max=16, table_max=24, view_max=24, compact=True)
PADDED = KeyCodec(namespace_max=16, table_max=24, view_max=24)
BOTH = pytest.mark.parametrize("codec", [CODEC, PADDED], ids=["compact", "padded"])

_name_chars = st.characters(
    blacklist_categories=("Cc", "Cs", "Cn", "Zs", "Zl", "Zp"),
    blacklist_characters="\\",
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
    """spec/format.md §5: compact keys (format 2) and padded keys (format 1)."""
    assert KeyCodec(8, 8, 8, compact=True).table("ns1", "table1") == "AAACns1 table1"
    assert KeyCodec(8, 8, 8, compact=True).namespace("ns1") == "AAABns1"
    assert KeyCodec(8, 8, 8, compact=True).transaction("t-1") == "AAAEt-1"
    assert KeyCodec(8, 8, 8).table("ns1", "table1") == "AAACns1     table1  "
    assert KeyCodec(8, 8, 8).transaction("t-1") == "AAAEt-1" + " " * 61


@BOTH
@given(ns=names, table=names)
def test_round_trip(codec, ns, table):
    decoded = codec.decode(codec.table(ns, table))
    assert decoded.object_type is ObjectType.TABLE
    assert decoded.parts == (ns, table)
    assert codec.decode(codec.namespace(ns)).parts == (ns,)
    assert codec.decode(codec.view(ns, table)).parts == (ns, table)
    assert codec.decode(codec.transaction("abc_DEF-1")).parts == ("abc_DEF-1",)


@BOTH
@given(ns1=names, t1=names, ns2=names, t2=names)
def test_key_order_is_name_order(codec, ns1, t1, ns2, t2):
    k1, k2 = codec.table(ns1, t1), codec.table(ns2, t2)
    assert (k1 < k2) == ((ns1, t1) < (ns2, t2))
    assert (k1.encode() < k2.encode()) == (k1 < k2)  # UTF-8 byte order agrees
    n1, n2 = codec.namespace(ns1), codec.namespace(ns2)
    assert (n1 < n2) == (ns1 < ns2)


@BOTH
@given(ns=names, other=names, table=names)
def test_tables_of_a_namespace_share_its_prefix(codec, ns, other, table):
    prefix = codec.tables_prefix(ns)
    assert codec.table(ns, table).startswith(prefix)
    assert codec.table(other, table).startswith(prefix) == (ns == other)
    assert not codec.view(ns, table).startswith(prefix)


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("", "empty"),
        ("x" * 17, "17 characters"),
        ("a b", "forbidden character"),
        ("a\tb", "forbidden character"),
        ("a\x00", "forbidden character"),
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
        PADDED.decode("AAACabc")


@pytest.mark.parametrize(
    "key",
    [
        "AAACabc",  # a table key with one part
        "AAACa b c",  # three parts
        "AAACa  b",  # an empty part between two spaces
        "AAAC b",  # an empty namespace
        "AAACa ",  # an empty table name
        "AAAB",  # an empty namespace key
        "AAABa b",  # a namespace key with two parts
        "AAAC" + "n" * 17 + " t",  # namespace wider than its width
        "AAAC" + "n b" + "t" * 25,  # table name wider than its width
        "AAAE" + "x" * 65,  # transaction id wider than 64
        "AAACns1     table1  ",  # a padded key in a compact catalog
    ],
)
def test_compact_decode_rejects_keys_off_the_encoding(key):
    with pytest.raises(CorruptCatalogError, match="name part"):
        CODEC.decode(key)
