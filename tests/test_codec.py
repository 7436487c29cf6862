from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from olympia.codec import SCHEMA, NodeFile, RootInfo, decode_node, encode_node
from olympia.errors import CorruptCatalogError
from olympia.node import DefRef, Node

keys = st.lists(st.text(min_size=1, max_size=12).map(lambda s: "AAAC" + s), unique=True).map(sorted)


@given(keys, st.sampled_from(["none", "zstd", "lz4"]), st.data())
def test_leaf_round_trip(ks, compression, data):
    values = tuple(
        data.draw(
            st.one_of(
                st.binary(max_size=40),
                st.builds(
                    lambda h: DefRef(f"def/{h}.binpb"),
                    st.text("abcdef0123456789", min_size=1, max_size=8),
                ),
            )
        )
        for _ in ks
    )
    nf = NodeFile(Node(0, tuple(ks), values), created_at_millis=17)
    back = decode_node(encode_node(nf, compression), "node/x.arrow")
    assert back.node.keys == tuple(ks)
    assert back.node.values == values
    assert back.created_at_millis == 17
    assert back.root is None


def test_internal_root_round_trip():
    info = RootInfo(
        version=7,
        catalog_def=b"\x08\x01",
        transaction_id="t1",
        previous_root="vn/" + "0" * 64,
        rollback_from_root="vn/" + "1" * 64,
        actions=(("AAACa", b"act1"), ("AAACb", b"act2")),
    )
    node = Node(2, ("AAACa", "AAACm"), (), ("node/a.arrow", "node/b.arrow"))
    back = decode_node(encode_node(NodeFile(node, 5, info)), "vn/x")
    assert back.root == info
    assert back.node.children == ("node/a.arrow", "node/b.arrow")
    assert back.node.height == 2


def _valid() -> bytes:
    return encode_node(NodeFile(Node(0, ("AAACa", "AAACb"), (b"1", b"2")), 1), "none")


def test_truncated_file_names_the_file():
    data = _valid()
    for cut in (0, 10, len(data) // 2, len(data) - 1):
        with pytest.raises(CorruptCatalogError, match=r"node/t\.arrow"):
            decode_node(data[:cut], "node/t.arrow")


def test_flipped_bytes_are_detected():
    data = bytearray(_valid())
    # the value bytes b"1" and b"2" sit in the uncompressed body: damage one
    idx = data.find(b"AAACb")
    data[idx + 4] = ord("c")
    with pytest.raises(CorruptCatalogError, match=r"node/f\.arrow"):
        decode_node(bytes(data), "node/f.arrow")


def test_foreign_arrow_file_is_refused():
    sink = pa.BufferOutputStream()
    table = pa.table({"a": [1, 2]})
    with pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    with pytest.raises(CorruptCatalogError, match="magic"):
        decode_node(sink.getvalue().to_pybytes(), "node/foreign.arrow")


def test_future_format_version_is_refused():
    schema = SCHEMA.with_metadata(
        {b"olympia.magic": b"olympia-node", b"olympia.format-version": b"2"}
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, schema) as w:
        w.write_table(pa.table([pa.array([], t.type) for t in SCHEMA], schema=schema))
    with pytest.raises(CorruptCatalogError, match="format version 2"):
        decode_node(sink.getvalue().to_pybytes(), "node/v2.arrow")


def test_random_bytes_are_refused():
    with pytest.raises(CorruptCatalogError, match="unreadable Arrow IPC"):
        decode_node(b"hello world" * 10, "node/r.arrow")
