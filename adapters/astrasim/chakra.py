"""Just enough of the Chakra execution-trace (ET) format to drive ASTRA-sim.

ASTRA-sim 2.0 reads one ``<prefix>.<npu>.et`` file per NPU: a stream of
varint-length-delimited protobuf messages, a ``GlobalMetadata`` first, then
``Node``s (schema: mlcommons/chakra ``schema/protobuf/et_def.proto``). The
messages are built here from a hand-written descriptor holding the subset of
fields cosim writes, with Chakra's field numbers, so the bytes are what
Chakra's own generator writes and no ``chakra`` package is needed.

Main names: :func:`collective_node`, :func:`send_node`, :func:`recv_node`, :func:`idle_node`,
:func:`write_et`, :func:`read_et`.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

ET_VERSION = "0.0.4"  # the version Chakra's microbenchmark generator stamps

# Chakra NodeType values.
COMP_NODE, COMM_SEND_NODE, COMM_RECV_NODE, COMM_COLL_NODE = 4, 5, 6, 7
# Chakra CollectiveCommType values.
ALL_REDUCE, ALL_GATHER, ALL_TO_ALL, REDUCE_SCATTER = 0, 2, 6, 7

_F = descriptor_pb2.FieldDescriptorProto
# (name, number, type, label, message type) of each field cosim uses.
_ATTRIBUTE_FIELDS = [("name", 1, _F.TYPE_STRING), ("doc_string", 2, _F.TYPE_STRING),
                     ("int32_val", 7, _F.TYPE_INT32), ("int64_val", 9, _F.TYPE_INT64),
                     ("uint64_val", 13, _F.TYPE_UINT64), ("bool_val", 27, _F.TYPE_BOOL),
                     ("string_val", 29, _F.TYPE_STRING)]
_NODE_FIELDS = [("id", 1, _F.TYPE_UINT64), ("name", 2, _F.TYPE_STRING), ("type", 3, _F.TYPE_INT32),
                ("ctrl_deps", 4, _F.TYPE_UINT64), ("data_deps", 5, _F.TYPE_UINT64),
                ("start_time_micros", 6, _F.TYPE_UINT64), ("duration_micros", 7, _F.TYPE_UINT64),
                ("attr", 10, _F.TYPE_MESSAGE)]
_REPEATED = {"ctrl_deps", "data_deps", "attr"}


def _message_classes() -> tuple[Any, Any, Any]:
    """Builds AttributeProto, GlobalMetadata and Node in a private descriptor pool.

    ``Node.type`` is declared int32 rather than the NodeType enum: both are
    varints on the wire, and it spares declaring the enum.
    """
    file = descriptor_pb2.FileDescriptorProto(name="cosim_chakra_et_subset.proto", package="ChakraProtoMsg",
                                              syntax="proto3")
    attribute = file.message_type.add(name="AttributeProto")
    attribute.oneof_decl.add(name="value")  # a oneof, as in Chakra, so bool_val=False is still written
    for name, number, kind in _ATTRIBUTE_FIELDS:
        field = attribute.field.add(name=name, number=number, type=kind, label=_F.LABEL_OPTIONAL)
        if number > 2:
            field.oneof_index = 0
    metadata = file.message_type.add(name="GlobalMetadata")
    metadata.field.add(name="version", number=1, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
    metadata.field.add(name="attr", number=2, type=_F.TYPE_MESSAGE, label=_F.LABEL_REPEATED,
                       type_name=".ChakraProtoMsg.AttributeProto")
    node = file.message_type.add(name="Node")
    for name, number, kind in _NODE_FIELDS:
        node.field.add(name=name, number=number, type=kind,
                       label=_F.LABEL_REPEATED if name in _REPEATED else _F.LABEL_OPTIONAL,
                       type_name=".ChakraProtoMsg.AttributeProto" if kind == _F.TYPE_MESSAGE else None)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return tuple(message_factory.GetMessageClass(pool.FindMessageTypeByName(f"ChakraProtoMsg.{name}"))
                 for name in ("AttributeProto", "GlobalMetadata", "Node"))  # type: ignore[return-value]


AttributeProto, GlobalMetadata, Node = _message_classes()


def _node(node_id: int, name: str, node_type: int, deps: Iterable[int], **attrs: tuple[str, Any]) -> Any:
    node = Node(id=node_id, name=name, type=node_type, ctrl_deps=list(deps))
    node.attr.add(name="is_cpu_op", bool_val=False)  # ASTRA-sim issues only non-CPU nodes to the network
    for attr_name, (field, value) in attrs.items():
        node.attr.add(name=attr_name, **{field: value})
    return node


def collective_node(node_id: int, comm_type: int, size_bytes: int, comm_group: int | None = None) -> Any:
    """A COMM_COLL_NODE; ``size_bytes`` is ASTRA-sim's per-NPU ``comm_size``.

    ``comm_group`` names a group of ``--comm-group-configuration`` in the
    ``pg_name`` attribute (ASTRA-sim's ``Workload::extract_comm_group``); None
    (or 0) is every NPU.
    """
    attrs: dict[str, tuple[str, Any]] = {"comm_type": ("int64_val", comm_type), "comm_size": ("int64_val", size_bytes)}
    if comm_group is not None:
        attrs["pg_name"] = ("string_val", str(comm_group))
    return _node(node_id, f"COLL_{comm_type}", COMM_COLL_NODE, (), **attrs)


def idle_node(node_id: int = 0) -> Any:
    """A GPU COMP_NODE of no duration, which ASTRA-sim replays as 1 ns.

    An NPU with nothing to do gets one: ASTRA-sim's feeder stops the run ("No
    dependancy free nodes found") on a trace without nodes, and its statistics
    refuse an INVALID_NODE ("Only GPU and COMM types are supported").
    """
    return _node(node_id, "IDLE", COMP_NODE, ())


def send_node(node_id: int, src: int, dst: int, size_bytes: int, tag: int, deps: Iterable[int] = ()) -> Any:
    """A COMM_SEND_NODE from NPU ``src`` to ``dst`` (matched to a receive by tag)."""
    return _node(node_id, f"SEND_{src}_{dst}_{tag}", COMM_SEND_NODE, deps, comm_src=("int32_val", src),
                 comm_dst=("int32_val", dst), comm_size=("int64_val", size_bytes), comm_tag=("int32_val", tag))


def recv_node(node_id: int, src: int, dst: int, size_bytes: int, tag: int, deps: Iterable[int] = ()) -> Any:
    """A COMM_RECV_NODE on NPU ``dst`` for a send from ``src`` with the same tag."""
    return _node(node_id, f"RECV_{src}_{dst}_{tag}", COMM_RECV_NODE, deps, comm_src=("int32_val", src),
                 comm_dst=("int32_val", dst), comm_size=("int64_val", size_bytes), comm_tag=("int32_val", tag))


def _write_varint(stream: BinaryIO, value: int) -> None:
    while True:
        byte, value = value & 0x7F, value >> 7
        stream.write(bytes([byte | (0x80 if value else 0)]))
        if not value:
            return


def write_et(path: str | Path, nodes: Iterable[Any]) -> None:
    """Writes one NPU's trace: the metadata, then ``nodes``, each length-delimited."""
    with open(path, "wb") as stream:
        for message in (GlobalMetadata(version=ET_VERSION), *nodes):
            data = message.SerializeToString()
            _write_varint(stream, len(data))
            stream.write(data)


def read_et(path: str | Path) -> tuple[Any, list[Any]]:
    """Reads a trace written by :func:`write_et` (or Chakra): (metadata, nodes).

    Raises:
        ValueError: a truncated message.
    """
    data = Path(path).read_bytes()
    messages, pos = [], 0
    while pos < len(data):
        length, shift = 0, 0
        while True:
            byte = data[pos]
            pos += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        if pos + length > len(data):
            raise ValueError(f"{path}: truncated message at byte {pos}")
        messages.append(data[pos:pos + length])
        pos += length
    if not messages:
        return GlobalMetadata(), []
    return GlobalMetadata.FromString(messages[0]), [Node.FromString(m) for m in messages[1:]]


def attributes(node: Any) -> dict[str, Any]:
    """A node's attributes as {name: value}, whichever value field is set."""
    values = {}
    for attr in node.attr:
        field = attr.WhichOneof("value")
        values[attr.name] = getattr(attr, field) if field else None
    return values
