"""Read HLO text (`*.after_optimizations.txt`, `*.after_codegen.txt`,
`compiled.as_text()`) into a `Module`.

What the text holds: the `HloModule` line (name, `is_scheduled=true`, ...);
optionally the `FileNames` / `FunctionNames` / `FileLocations` /
`StackFrames` tables; then computations (`%name (params) -> shape {`, the
entry one prefixed `ENTRY`, closed by `}` with an optional
`, execution_thread="..."`), one instruction per statement
(`[ROOT] %name = shape opcode(operands), key=value, ...`). A statement can
span several lines (a `frontend_attributes={kernel_metadata={...}}` holding
a line break): a statement goes on while its brackets are open.

Nothing here trusts the text: a line that does not parse is skipped and
counted (`Module.source` says how many); the reader never raises on odd
content, only `ValueError` on text that holds no module at all.
"""

from __future__ import annotations

import functools
import re

from profanalyzer.read.hlo.model import (
    Computation,
    Instruction,
    Module,
    OpMetadata,
    Shape,
    StackFrames,
)

__all__ = ["parse_text", "parse_shape", "split_top", "looks_like_hlo_text"]

_SPECIAL = re.compile(r'[\\"(){}\[\],]')
_BRACKET = re.compile(r'[\\"(){}\[\]]')  # _SPECIAL without the comma
_OPEN = {"(": ")", "{": "}", "[": "]"}
_CLOSE = {")", "}", "]"}
_INSTR = re.compile(r"^\s*(ROOT\s+)?%?([^\s=(){}]+)\s*=\s*")
_COMP = re.compile(r"^(ENTRY\s+)?%?([^\s(]+)\s*\(")
_ARRAY = re.compile(r"([a-z][a-z0-9]*)\[([0-9,\s]*)\]")
_MEMSPACE = re.compile(r"S\((\d+)\)")
_COMMENT = re.compile(r"/\*.*?\*/")
_KEY = re.compile(r"\s*([A-Za-z_][\w.\-]*)=")
_META_FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|[^\s}]+)')
_TABLE_STR = re.compile(r'^(\d+)\s+"((?:[^"\\]|\\.)*)"\s*$')
_TABLE_REC = re.compile(r"^(\d+)\s+\{(.*)\}\s*$")
_CALL_KEYS = ("calls", "to_apply", "body", "condition", "branch_computations", "true_computation",
              "false_computation", "called_computations")
_TABLES = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")


def looks_like_hlo_text(head: str) -> bool:
    return bool(re.search(r"^\s*HloModule\s", head, re.M))


class _Walk:
    """The brackets and commas of `s` from `start` outside quotes, as
    (index, character); escapes inside quotes are skipped. `in_str`: whether
    the walk ends inside a quoted string (a statement spanning lines)."""

    def __init__(self, s: str, start: int = 0, in_str: bool = False) -> None:
        self.s, self.start, self.in_str = s, start, in_str

    def __iter__(self):
        skip = -1
        for m in _SPECIAL.finditer(self.s, self.start):
            at = m.start()
            if at <= skip:
                continue
            c = m.group()
            if self.in_str:
                if c == "\\":
                    skip = at + 1
                elif c == '"':
                    self.in_str = False
            elif c == '"':
                self.in_str = True
            elif c != "\\":
                yield at, c


def _depth(s: str, depth: int = 0, in_str: bool = False) -> tuple[int, bool]:
    """Bracket depth after `s` (quotes respected; escapes inside quotes skipped)."""
    walk = _Walk(s, 0, in_str)
    for _, c in walk:
        depth += 1 if c in _OPEN else -1 if c in _CLOSE else 0
    return depth, walk.in_str


def _match_close(s: str, i: int) -> int:
    """Index just past the bracket closing the one at s[i] (len(s) if none). The brackets are counted in
    one loop until a quote or backslash comes first; then the quote-aware walk decides."""
    depth = 0
    for m in _BRACKET.finditer(s, i):
        c = m.group()
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
            if depth == 0:
                return m.end()
        else:  # a quote or a backslash before the closing bracket
            return _match_close_quoted(s, i)
    return len(s)


def _match_close_quoted(s: str, i: int) -> int:
    """_match_close for a span that holds quoted text (brackets inside quotes do not count)."""
    depth = 0
    for at, c in _Walk(s, i):
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
            if depth == 0:
                return at + 1
    return len(s)


def split_top(s: str) -> list[str]:
    """`s` split at the commas outside brackets and quotes."""
    out, depth, start = [], 0, 0
    for at, c in _Walk(s):
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
        elif depth == 0:  # a comma
            out.append(s[start:at])
            start = at + 1
    out.append(s[start:])
    return out


@functools.lru_cache(maxsize=1 << 16)
def parse_shape(s: str) -> Shape:
    """`bf16[2,4096]{1,0:T(8,128)(2,1)S(1)}` or a tuple `(s32[], (f32[2]))`. Memoised: a Shape is frozen,
    and a program's instructions repeat a few thousand shape spellings (the collectives' traffic parses each
    operand's)."""
    s = _COMMENT.sub("", s).strip()
    if s.startswith("("):
        inner = s[1:_match_close(s, 0) - 1]
        parts = tuple(parse_shape(p) for p in split_top(inner) if p.strip())
        return Shape("tuple", parts=parts)
    m = _ARRAY.match(s)
    if not m:
        word = re.match(r"[a-z]+", s)
        return Shape(word.group() if word else "unknown")
    dims = tuple(int(d) for d in m.group(2).replace(" ", "").split(",") if d)
    rest = s[m.end():]
    layout = ""
    if rest.startswith("{"):
        layout = rest[:_match_close(rest, 0)]
    ms = _MEMSPACE.search(layout)
    return Shape(m.group(1), dims, int(ms.group(1)) if ms else 0, (), layout)


def _shape_end(s: str, i: int) -> int:
    """Where the shape starting at s[i] ends."""
    if i < len(s) and s[i] == "(":
        return _match_close(s, i)
    m = _ARRAY.match(s, i)
    if not m:
        m2 = re.compile(r"[a-z]+").match(s, i)
        return m2.end() if m2 else i
    j = m.end()
    if j < len(s) and s[j] == "{":
        j = _match_close(s, j)
    return j


def _attrs(rest: str) -> list[tuple[str, str]]:
    """`, key=value, key=value` (values may hold brackets, quotes, commas)."""
    out: list[tuple[str, str]] = []
    i, n = 0, len(rest)
    while i < n:
        while i < n and rest[i] in ", \n\t":
            i += 1
        m = _KEY.match(rest, i)
        if not m:
            break
        key, j = m.group(1), m.end()
        # the value runs to the next top-level ", key=" (or the end)
        depth, k = 0, n
        for at, c in _Walk(rest, j):
            if c in _OPEN:
                depth += 1
            elif c in _CLOSE:
                depth -= 1
            elif depth <= 0 and _KEY.match(rest, at + 1):  # a comma before a key
                k = at
                break
        out.append((key, rest[j:k].strip()))
        i = k
    return out


def _metadata(raw: str) -> OpMetadata:
    body = raw.strip()
    if body.startswith("{") and body.endswith("}"):
        body = body[1:-1]
    f: dict[str, str] = {}
    for k, v in _META_FIELD.findall(body):
        if v.startswith('"'):
            v = v[1:-1].encode("utf-8", "surrogatepass").decode("unicode_escape", "replace") if "\\" in v else v[1:-1]
        f.setdefault(k, v)

    def num(key: str) -> int:
        try:
            return int(f.get(key, "0"))
        except ValueError:
            return 0

    return OpMetadata(f.get("op_type", ""), f.get("op_name", ""), f.get("source_file", ""), num("source_line"),
                      num("stack_frame_id"))


def _operand_names(inner: str) -> tuple[tuple[str, ...], tuple[int, ...], str]:
    names: list[str] = []
    index: list[int] = []
    literal_parts: list[str] = []
    for piece in split_top(_COMMENT.sub("", inner)):
        p = piece.strip()
        if not p:
            continue
        m = re.search(r"%([^\s,()#]+)(?:#(\d+))?\s*$", p)
        if m:
            names.append(m.group(1))
            index.append(int(m.group(2)) if m.group(2) else -1)
        else:
            literal_parts.append(p)
    return tuple(names), tuple(index), ", ".join(literal_parts)


_OPCODE = re.compile(r"\s*([a-z][a-z0-9\-_]*)\(")


def call_parts(stmt: str, i: int) -> tuple[Shape, str, str, int] | None:
    """The instruction from `stmt[i]` on (just after `name = `): its result shape, its opcode, the text
    inside its operand parentheses and the index just past them; None when it does not read as one."""
    j = _shape_end(stmt, i)
    if j <= i:
        return None
    om = _OPCODE.match(stmt, j)
    if not om:
        return None
    op_close = _match_close(stmt, om.end() - 1)
    return parse_shape(stmt[i:j]), om.group(1), stmt[om.end():op_close - 1], op_close


def parse_instruction(stmt: str) -> Instruction | None:
    m = _INSTR.match(stmt)
    if not m:
        return None
    is_root, name = bool(m.group(1)), m.group(2)
    parts = call_parts(stmt, m.end())
    if parts is None:
        return None
    shape, opcode, inner, op_close = parts
    names, index, literal = _operand_names(inner)
    attrs = _attrs(stmt[op_close:])
    called: list[str] = []
    rest: list[tuple[str, str]] = []
    meta = OpMetadata()
    backend = ""
    for k, v in attrs:
        if k in _CALL_KEYS:
            called += [c.strip().lstrip("%") for c in v.strip("{}").split(",") if c.strip()]
            rest.append((k, v))
        elif k == "metadata":
            meta = _metadata(v)
        elif k == "backend_config":
            backend = v[1:-1].encode("utf-8", "surrogatepass").decode("unicode_escape", "replace") if v.startswith('"') else v
        else:
            rest.append((k, v))
    pnum = -1
    if opcode == "parameter":
        try:
            pnum = int(literal)
        except ValueError:
            pnum = -1
    text = stmt.strip()
    if text.startswith("ROOT "):
        text = text[5:]
    return Instruction(name=name, opcode=opcode, shape=shape, operands=names, operand_indices=index, called=tuple(called), attrs=tuple(rest),
                       metadata=meta, backend_config=backend, text=text, is_root=is_root, parameter_number=pnum,
                       literal=literal if opcode == "constant" else "")


def _tables(lines: list[str], start: int) -> tuple[StackFrames, int]:
    """The stack-frame tables from line `start` on; (tables, first line after)."""
    got: dict[str, list] = {t: [] for t in _TABLES}
    cur = None
    i = start
    while i < len(lines):
        ln = lines[i].strip()
        if ln in _TABLES:
            cur = ln
        elif not ln:
            pass
        elif cur is not None and (_TABLE_STR.match(ln) or _TABLE_REC.match(ln)):
            ms = _TABLE_STR.match(ln)
            if ms:
                got[cur].append(ms.group(2))
            else:
                mr = _TABLE_REC.match(ln)
                assert mr is not None
                fields = dict(re.findall(r"(\w+)=(-?\d+)", mr.group(2)))
                if cur == "FileLocations":
                    got[cur].append((int(fields.get("file_name_id", 0)), int(fields.get("function_name_id", 0)),
                                     int(fields.get("line", 0))))
                else:  # the text prints a frame's parent as the proto's id + 1 (1: none): stored as the proto's
                    got[cur].append((int(fields.get("file_location_id", 0)),
                                     max(0, int(fields.get("parent_frame_id", 1)) - 1)))
        else:
            break
        i += 1
    return StackFrames(tuple(got["FileNames"]), tuple(got["FunctionNames"]), tuple(got["FileLocations"]),
                       tuple(got["StackFrames"])), i


def parse_text(text: str, source: str = "", stage: str = "") -> Module:
    """One module from its HLO text. Raises ValueError when there is none."""
    lines = text.splitlines()
    k = next((n for n, ln in enumerate(lines) if ln.startswith("HloModule")), None)
    if k is None:
        raise ValueError("no 'HloModule' line: not HLO text")
    header = lines[k]
    hm = re.match(r"HloModule\s+([^\s,]+)", header)
    name = hm.group(1) if hm else "module"
    scheduled = "is_scheduled=true" in header
    np_m = re.search(r"num_partitions=(\d+)", header)
    stack = StackFrames()
    i = k + 1
    while i < len(lines) and not lines[i].strip():
        i += 1
    if i < len(lines) and lines[i].strip() in _TABLES:
        stack, i = _tables(lines, i)
    comps: list[Computation] = []
    entry = ""
    skipped = 0
    cur_name = None
    cur_entry = False
    stmts: list[str] = []
    buf: list[str] = []
    depth, in_str = 0, False
    while i < len(lines):
        ln = lines[i]
        i += 1
        if cur_name is None:
            m = _COMP.match(ln)
            if m and ln.rstrip().endswith("{"):
                cur_name, cur_entry = m.group(2), bool(m.group(1))
                stmts, buf, depth, in_str = [], [], 0, False
            continue
        if not buf and ln.startswith("}"):
            thread = ""
            tm = re.search(r'execution_thread="([^"]*)"', ln)
            if tm:
                thread = tm.group(1)
            instrs = []
            for s in stmts:
                ins = parse_instruction(s)
                if ins is None:
                    skipped += 1
                else:
                    instrs.append(ins)
            comps.append(Computation(cur_name, tuple(instrs), cur_entry, thread))
            if cur_entry:
                entry = cur_name
            cur_name = None
            continue
        if not buf and not ln.strip():
            continue
        buf.append(ln)
        depth, in_str = _depth(ln, depth, in_str)
        if depth <= 0 and not in_str:
            stmts.append("\n".join(buf))
            buf, depth = [], 0
    if not entry and comps:
        entry = comps[-1].name
    src = source + (f" ({skipped} statements not parsed)" if skipped else "")
    return Module(name=name, computations=tuple(comps), entry=entry, is_scheduled=scheduled, stack=stack,
                  source=src, stage=stage, num_partitions=int(np_m.group(1)) if np_m else 1)
