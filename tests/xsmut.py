"""Mutators of real-layout XSpace bytes for the fuzz tests (tests only).

Two families:

* byte-level: flips, truncations, insertions, duplicated / shuffled chunks,
  varint corruption of the raw bytes (most of these break the framing and
  exercise the reader's error paths);
* structure-aware: the bytes are parsed into a wire tree following the
  XSpace schema (planes, lines, events, stats, metadata maps), one node is
  changed (a varint set to an extreme value, a field deleted, duplicated,
  renumbered or given another wire type, a string mangled, siblings shuffled)
  and the tree is serialised again with correct lengths, so the mutation
  survives the framing and reaches the trace model and the analysis.

Every mutation is a tuple of small integers (`op`, `a`, `b`, `c`) so that a
fuzzer can draw and shrink them; `a`/`b` pick nodes and positions modulo the
available count.
"""

from __future__ import annotations

import functools
import random

# Sub-message field numbers per message type (the project's xplane.proto).
_SCHEMA: dict[str, dict[int, str]] = {
    "XSpace": {1: "XPlane"},
    "XPlane": {3: "XLine", 4: "EventMetaEntry", 5: "StatMetaEntry", 6: "XStat"},
    "EventMetaEntry": {2: "XEventMetadata"},
    "StatMetaEntry": {2: "XStatMetadata"},
    "XLine": {4: "XEvent"},
    "XEvent": {4: "XStat"},
    "XEventMetadata": {5: "XStat"},
    "XStatMetadata": {},
    "XStat": {},
}

#: Interesting 64-bit varint values (unsigned wire form; negatives wrap).
INTERESTING = (
    0,
    1,
    2,
    7,
    127,
    128,
    1000,
    10**6,
    10**12,
    1_732_000_000_000_000_000,  # an epoch timestamp in ns
    1_732_000_000_000_000_000 * 1000 % (1 << 64),  # ... times 1000 (wrapped)
    (1 << 31) - 1,
    1 << 31,
    (1 << 32) - 1,
    1 << 32,
    (1 << 53) + 1,
    (1 << 61) - 1,
    1 << 61,
    (1 << 62) - 1,
    1 << 62,
    (1 << 63) - 1,
    1 << 63,  # INT64_MIN
    (1 << 63) + 1,
    (1 << 64) - 1,  # -1
    (1 << 64) - 2,  # -2
    (1 << 64) - 1000,  # -1000
    (1 << 64) - 10**12,
    (1 << 64) - (1 << 62),
)


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("bad varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def write_varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


class Field:
    """One wire field: number, wire type, and a value (int for varints, bytes
    for fixed and raw length-delimited fields, list[Field] for sub-messages)."""

    __slots__ = ("num", "wire", "value", "msg")

    def __init__(self, num: int, wire: int, value, msg: str | None = None):
        self.num, self.wire, self.value, self.msg = num, wire, value, msg  # msg: sub-message type

    def copy(self) -> Field:
        v = self.value
        return Field(self.num, self.wire, [f.copy() for f in v] if isinstance(v, list) else v, self.msg)


def parse(buf: bytes, msg: str = "XSpace") -> list[Field]:
    """Parse buf as message type msg; sub-messages that do not parse stay raw."""
    out: list[Field] = []
    pos, end = 0, len(buf)
    subs = _SCHEMA.get(msg, {})
    while pos < end:
        key, pos = read_varint(buf, pos)
        num, wire = key >> 3, key & 7
        if num == 0:
            raise ValueError("field 0")
        if wire == 0:
            v, pos = read_varint(buf, pos)
            out.append(Field(num, 0, v))
        elif wire == 1:
            if pos + 8 > end:
                raise ValueError("short fixed64")
            out.append(Field(num, 1, buf[pos : pos + 8]))
            pos += 8
        elif wire == 5:
            if pos + 4 > end:
                raise ValueError("short fixed32")
            out.append(Field(num, 5, buf[pos : pos + 4]))
            pos += 4
        elif wire == 2:
            n, pos = read_varint(buf, pos)
            if pos + n > end:
                raise ValueError("short bytes")
            body = buf[pos : pos + n]
            pos += n
            sub = subs.get(num)
            if sub is not None:
                try:
                    out.append(Field(num, 2, parse(body, sub), sub))
                    continue
                except ValueError:
                    pass
            out.append(Field(num, 2, body))
        else:
            raise ValueError("wire type")
    return out


def serialize(fields: list[Field]) -> bytes:
    out = bytearray()
    for f in fields:
        out += write_varint((f.num << 3) | f.wire)
        if f.wire == 0:
            out += write_varint(f.value)
        elif f.wire == 2:
            body = serialize(f.value) if isinstance(f.value, list) else f.value
            out += write_varint(len(body))
            out += body
        else:
            out += f.value
    return bytes(out)


def _walk(fields: list[Field], out: list[tuple[list[Field], int]]) -> None:
    for i, f in enumerate(fields):
        out.append((fields, i))
        if isinstance(f.value, list):
            _walk(f.value, out)


def nodes(tree: list[Field]) -> list[tuple[list[Field], int]]:
    """Every field of the tree as (parent list, index), depth first."""
    out: list[tuple[list[Field], int]] = []
    _walk(tree, out)
    return out


@functools.cache
def parsed(seed: bytes) -> list[Field]:
    return parse(seed)


# ---------------------------------------------------------------------------
# Mutations
# ---------------------------------------------------------------------------

BYTE_OPS = ("flip", "set", "truncate", "insert", "dup_chunk", "swap_chunks", "delete_chunk", "varint_bytes")
TREE_OPS = ("varint", "varint_small", "delete", "duplicate", "shuffle", "renumber", "rewire", "mangle", "move", "stat_value", "stat_value")

#: Stat values that stress numeric code: doubles (sub-normal, huge, non-finite)
#: and strings that parse as odd numbers.
INTERESTING_DOUBLES = (0.0, -0.0, 5e-324, 1e-300, 1e-12, 0.5, 1.0, -1.0, 1e19, 1.8446744073709552e19, 2.0**63,
                       1e300, float("inf"), float("-inf"), float("nan"))
INTERESTING_STRINGS = (b"", b"0", b"-1", b"1e999", b"nan", b"inf", b"\xc2\xb2", b"12abc", b"18446744073709551616",
                       b"loop fusion", b"all-reduce", b"convolution", b"custom-call", b"\x1b[2J<b>x</b>")
OPS = BYTE_OPS + TREE_OPS


def mutate_bytes(data: bytes, op: str, a: int, b: int, c: int) -> bytes:
    buf = bytearray(data)
    n = len(buf)
    if n == 0:
        return bytes([a & 0xFF])
    p = a % n
    if op == "flip":
        buf[p] ^= 1 << (b % 8)
    elif op == "set":
        buf[p] = b & 0xFF
    elif op == "truncate":
        del buf[p:]
    elif op == "insert":
        rng = random.Random(c)
        buf[p:p] = bytes(rng.randrange(256) for _ in range(1 + b % 16))
    elif op == "dup_chunk":
        q = b % (n + 1)
        buf[q:q] = buf[p : p + 1 + c % 256]
    elif op == "swap_chunks":
        ln = 1 + c % 256
        q = b % n
        x, y = sorted((p, q))
        if y >= x + ln:
            buf[x : x + ln], buf[y : y + ln] = buf[y : y + ln], buf[x : x + ln]
    elif op == "delete_chunk":
        del buf[p : p + 1 + b % 64]
    elif op == "varint_bytes":
        # Corrupt a varint in place: set continuation bits over a run (an
        # over-long or unterminated varint), or clear one (a short one).
        ln = 1 + b % 11
        for k in range(p, min(n, p + ln)):
            buf[k] = buf[k] | 0x80 if c % 2 == 0 else buf[k] & 0x7F
    return bytes(buf)


def mutate_tree(tree: list[Field], op: str, a: int, b: int, c: int) -> None:
    """Apply one structure-aware mutation to tree in place."""
    all_nodes = nodes(tree)
    if not all_nodes:
        return
    if op in ("varint", "varint_small"):
        cands = [(par, i) for par, i in all_nodes if par[i].wire == 0]
        if not cands:
            return
        par, i = cands[a % len(cands)]
        if op == "varint":
            par[i].value = INTERESTING[b % len(INTERESTING)]
        else:  # a nearby value (offsets and durations shifted a little)
            par[i].value = (par[i].value + (b % 2001) - 1000) % (1 << 64)
        return
    if op == "stat_value":
        # Give an XStat a double, signed or string value (the decoders and the
        # numeric code must cope with any of them on any stat).
        import struct

        stats = [par[i] for par, i in all_nodes if par[i].msg == "XStat"]
        if (c >> 8) % 2:  # half of the time: an op-metadata stat (FLOPs, bytes, category, ...)
            in_meta = [g for par, i in all_nodes if par[i].msg == "XEventMetadata" for g in par[i].value if g.msg == "XStat"]
            stats = in_meta or stats
        if not stats:
            return
        st = stats[a % len(stats)]
        keep = [f for f in st.value if f.num not in (2, 3, 4, 5, 6, 7)]
        kind = b % 3
        if kind == 0:
            val = Field(2, 1, struct.pack("<d", INTERESTING_DOUBLES[c % len(INTERESTING_DOUBLES)]))
        elif kind == 1:
            val = Field(4, 0, INTERESTING[c % len(INTERESTING)])
        else:
            val = Field(5, 2, INTERESTING_STRINGS[c % len(INTERESTING_STRINGS)])
        st.value = keep + [val]
        return
    par, i = all_nodes[a % len(all_nodes)]
    f = par[i]
    if op == "delete":
        del par[i]
    elif op == "duplicate":
        par.insert(b % (len(par) + 1), f.copy())
    elif op == "shuffle":
        random.Random(b).shuffle(par)
    elif op == "renumber":
        f.num = 1 + b % 12
    elif op == "rewire":
        # Same field number, another wire type with a plausible payload.
        w = (0, 1, 2, 5)[b % 4]
        if w == f.wire:
            return
        f.wire = w
        f.value = {0: c % (1 << 64), 1: (c % (1 << 64)).to_bytes(8, "little"), 2: write_varint(c), 5: (c % (1 << 32)).to_bytes(4, "little")}[w]
    elif op == "mangle":
        if f.wire != 2:
            return
        body = serialize(f.value) if isinstance(f.value, list) else f.value
        k = b % 5
        if k == 0:  # UTF-8 round trip through latin-1 (a text pipeline)
            body = body.decode("latin-1").encode("utf-8")
        elif k == 1:  # invalid UTF-8
            body = body[: c % (len(body) + 1)] + b"\xff\xfe" + body[c % (len(body) + 1) :]
        elif k == 2:
            body = b""
        elif k == 3:  # terminal control characters and markup in names
            body = b"\x1b[31m<script>x</script>\x00" + body
        else:
            body = body * (2 + c % 3)
        f.value = body
    elif op == "move":
        # Move a node to another parent of the tree (e.g. an event into
        # another line, a stat into an event).
        del par[i]
        containers = [x[j].value for x, j in nodes(tree) if isinstance(x[j].value, list)]
        dst = containers[b % len(containers)] if containers else tree
        dst.insert(c % (len(dst) + 1), f)


def apply(seed: bytes, mutations) -> bytes:
    """Apply a sequence of (op index, a, b, c) mutations to seed bytes.

    Tree mutations come first (on a copy of the parsed seed), then byte
    mutations on the serialised result, in the order given within each family.
    """
    ops = [(OPS[o % len(OPS)], a, b, c) for o, a, b, c in mutations]
    tree_ops = [m for m in ops if m[0] in TREE_OPS]
    data = seed
    if tree_ops:
        tree = [f.copy() for f in parsed(seed)]
        for op, a, b, c in tree_ops:
            mutate_tree(tree, op, a, b, c)
        data = serialize(tree)
    for op, a, b, c in ops:
        if op in BYTE_OPS:
            data = mutate_bytes(data, op, a, b, c)
    return data
