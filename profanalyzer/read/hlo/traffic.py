"""The bytes a collective moves per device, from its shapes and its group:
what a link carries, not what the op touches in HBM (`bytes_accessed` counts
operands plus result, twice an all-reduce's buffer).

For a group of n devices, per device (the bandwidth-optimal algorithms, as a
ring or a torus dimension runs them; the same factors give the *bus
bandwidth* a collective is compared with its link at):

* all-reduce: a reduce-scatter then an all-gather of the buffer: 2 (n-1)/n x
  the buffer;
* all-gather: (n-1)/n x the gathered result (every other device's shard
  arrives);
* reduce-scatter: (n-1)/n x the operand (every other device's part leaves);
* all-to-all: (n-1)/n x the operand (all but the device's own chunk);
* collective-permute, send/recv: the operand, once.

The group is the instruction's own (`replica_groups={{0,1},...}` or the iota
form `[groups,size]<=[...]`); else, for an all-gather or reduce-scatter, the
ratio of its result to its operand; else unknown, and (n-1)/n is taken as 1
(the large-group bound, said by `group_from`).

Reads HLO text only (one instruction as a trace's metadata or a dump prints
it); no trace, no analysis.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from profanalyzer.read.hlo.model import Shape
from profanalyzer.read.hlo.text import call_parts, parse_shape, split_top
from profanalyzer.read.hlo.truth import collective_kind

__all__ = ["Traffic", "ALGORITHM", "moved_factor", "buffer_bytes", "group_size", "start_result", "traffic_of_text", "io_bytes",
           "name_free"]

#: How each collective type moves its bytes (the factor's source), as the reports say it.
ALGORITHM = {
    "all_reduce": "reduce-scatter + all-gather: 2(n-1)/n x the buffer",
    "all_gather": "(n-1)/n x the gathered result",
    "reduce_scatter": "(n-1)/n x the operand",
    "all_to_all": "(n-1)/n x the operand",
    "collective_permute": "the operand, once",
    "send_recv": "the operand, once",
}

_GROUPS_LIST = re.compile(r"replica_groups=\{(\{[^=]*?\})\}")
_ASSIGN = re.compile(r"=\s*")
_GROUPS_MESH = re.compile(r"replica_groups=mesh\[([^\]]*)\](?:\s*\{([^}]*)\})?")
_GROUPS_IOTA = re.compile(r"replica_groups=\[(\d+),(\d+)\]<=")
_NAME = re.compile(r"%[\w.\-]+")


@dataclass(frozen=True)
class Traffic:
    """One collective instruction's bytes over the links, per device."""

    kind: str  # profanalyzer.core.vocab COLLECTIVE_TYPES
    buffer_bytes: float  # the data it is about (see ALGORITHM)
    group: int | None  # devices in its group; None: unknown
    group_from: str  # "replica_groups" | "shapes" | "unknown (the large-group bound)"
    moved_bytes: float  # per device over the links


def moved_factor(kind: str, n: int | None) -> float:
    """Bytes moved per device over the buffer's bytes, for a group of `n` (None: the large-group bound)."""
    share = 1.0 if n is None else (n - 1) / n if n > 0 else 0.0
    if kind == "all_reduce":
        return 2.0 * share
    if kind in ("all_gather", "reduce_scatter", "all_to_all"):
        return share
    return 1.0


def buffer_bytes(kind: str, in_bytes: float, out_bytes: float) -> float:
    """The buffer the factor applies to: the gathered result of an all-gather, else the operand (or the result when the operand is unknown)."""
    if kind == "all_gather":
        return out_bytes or in_bytes
    return in_bytes or out_bytes


def group_size(text: str) -> int | None:
    """The devices in a collective's group from its `replica_groups` (None: absent, empty or a form not read):
    a list `{{0,1},{2,3}}`, the iota form `[groups,size]<=[...]`, or mesh axes `mesh['a'=1,'fsdp'=16] {'fsdp'}`
    (the product of the named axes' sizes)."""
    m = _GROUPS_MESH.search(text)
    if m:
        sizes = {k: int(v) for k, v in re.findall(r"'([^']+)'=(\d+)", m.group(1))}
        named = re.findall(r"'([^']+)'", m.group(2) or "") or list(sizes)
        n = 1
        for k in named:
            n *= sizes.get(k, 1)
        return n if sizes else None
    m = _GROUPS_IOTA.search(text)
    if m:
        return int(m.group(2))
    m = _GROUPS_LIST.search(text)
    if m:
        counts = [len([x for x in g.split(",") if x.strip()]) for g in re.findall(r"\{([^{}]*)\}", m.group(1))]
        return max(counts) if counts and max(counts) > 0 else None
    return None


def start_result(shape: Shape, opcode: str) -> Shape:
    """An async start's result: `(operands, result, context...)` or `(operand, result)`; else the shape itself."""
    if not (opcode.endswith("-start") and shape.is_tuple and shape.parts):
        return shape
    parts = [p for p in shape.parts if p.is_tuple or p.dims]  # scalar contexts (u32[]) dropped
    if len(parts) >= 2 and parts[0].is_tuple:
        return parts[1]
    return parts[-1] if parts else shape


def io_bytes(text: str) -> tuple[str, float, float] | None:
    """(opcode, operand bytes, result bytes) of one instruction's text with
    inline operand shapes (`%x = bf16[8]{0} all-reduce(bf16[8]{0} %y), ...`);
    None when the text has no shape."""
    eq = _ASSIGN.search(text)
    parts = call_parts(text, eq.end()) if eq else None
    if parts is None or parts[0].dtype == "unknown":
        return None
    shape, opcode, inner, _end = parts
    in_b = 0.0
    for piece in split_top(inner):
        p = piece.strip()
        if "%" in p:
            p = p[:p.rfind("%")].strip()
        if p:
            s = parse_shape(p)
            if opcode.endswith("-done") and s.is_tuple and s.parts:  # a done's operand: its start's (operands, result, ...)
                s = s.parts[0]
            in_b += s.bytes
    return opcode, in_b, float(start_result(shape, opcode).bytes)


def traffic_of_text(kind: str, text: str) -> Traffic | None:
    """The bytes one collective moves per device, from its text (None: no shapes in it, or none it moves).
    Its opcode names the algorithm when it is a collective's; else (an async start on a thread) `kind`."""
    got = io_bytes(text)
    if got is None:
        return None
    opcode, in_b, out_b = got
    kind = collective_kind(opcode) or kind  # what the instruction does (a windowed einsum's permute moves its operand)
    n = group_size(text)
    how = "replica_groups"
    if n is None and in_b > 0 and out_b > 0 and kind in ("all_gather", "reduce_scatter"):
        ratio = out_b / in_b if kind == "all_gather" else in_b / out_b
        if ratio >= 1 and abs(ratio - round(ratio)) < 1e-6:
            n, how = int(round(ratio)), "shapes"
    if n is None:
        how = "unknown (the large-group bound)"
    buf = buffer_bytes(kind, in_b, out_b)
    if buf <= 0:  # a start that carries no data (the operands come with its update or done): not this text's to say
        return None
    return Traffic(kind, buf, n, how, buf * moved_factor(kind, n))


def name_free(text: str) -> str:
    """`text` with each instruction name (`%all-gather.17.cloned.1`) written `%`: texts equal under it have one
    traffic, since `traffic_of_text` reads the shapes, the opcode and the group, never a name (a name holds no
    bracket, comma, quote or `=`, so the shapes' and the groups' spans do not move). A program unrolled by
    layers prints thousands of collectives that differ by their names alone. The text itself when its group is
    mesh axes: their quoted names are compared, and could hold a `%`."""
    return text if "mesh[" in text else _NAME.sub("%", text)
