"""The op parse: one op's identity split into per-field features (`Op`,
with the category/opcode/name infos and the name stack's, from
`classify.stack`, memoized per field value in the run's `Features`), the
matmul precision helpers and `matmul_kernel_flops`."""

from __future__ import annotations

import math
import re
from typing import Any, NamedTuple

from profanalyzer.classify.stack import TfOpInfo, TokenInfo, rules_view, tf_op_info
from profanalyzer.classify.tables import (
    ARRAY,
    ASYNC_COLLECTIVE_FUSION,
    ASYNC_COPY,
    ATTENTION_KERNELS,
    CALLS,
    COLLECTIVE_FUSION_CATEGORIES,
    COLLECTIVE_KINDS,
    GENERIC_ASYNC,
    GMM,
    INSTR,
    INT8,
    KERNEL_ATTR_KEYS,
    KERNELISH_CATEGORY,
    KIND_IN_TEXT,
    MATMUL_CATEGORIES,
    MATMUL_OPCODES,
    MAX_FIELD,
    NAME_HINT,
    NAME_OPCODE,
    OFFLOAD_CALL,
    OPCODE,
    OTHER_ATTENTION_KERNEL_NAME,
    PREC_ARRAY,
    PRECISIONS,
    REMAT_NAME,
    ROLE_SUFFIX,
    UNSAFE,
)


# --------------------------------------------------------------------------
# Parsing. Features of each field depend on that field alone: across a
# profile, categories, opcodes, tf_op stacks and names repeat a lot even when
# whole ops do not, so `Features` (part of the run's classify memo) keeps
# them per field value.
# --------------------------------------------------------------------------
def as_text(value: Any, cap: int = MAX_FIELD) -> str:
    """Coerce anything (None, NaN, bytes, numbers) to a bounded str."""
    if value is None:
        return ""
    if isinstance(value, str):
        s = value
    elif isinstance(value, (bytes, bytearray)):
        s = bytes(value).decode("utf-8", "replace")
    elif isinstance(value, float) and math.isnan(value):
        return ""
    else:
        try:
            s = str(value)
        except Exception:  # pragma: no cover - pathological __str__
            return ""
    if len(s) > cap:
        s = s[:cap]
    return s.replace("\x00", "") if "\x00" in s else s


#: The characters UNSAFE rejects among printable ASCII.
_MARKUP = frozenset('<>&"`|\\')


def clip(s: str, n: int = 48) -> str:
    """A short, inert excerpt of an untrusted string for reasons: printable
    ASCII only, with markup and markdown-table characters replaced by '?'."""
    if len(s) <= n and s.isascii() and s.isprintable() and _MARKUP.isdisjoint(s):
        return s  # nothing UNSAFE matches (printable ASCII is \x20-\x7e)
    s = UNSAFE.sub("?", s[: n + 1])
    return s if len(s) <= n else s[: n - 3] + "..."


def _kind_of(s: str) -> str | None:
    for kind, rx in COLLECTIVE_KINDS:
        if rx.match(s):
            return kind
    return None


def kind_in_text(s: str) -> str | None:
    for kind, rx in KIND_IN_TEXT:
        if rx.search(s):
            return kind
    return None


def _role_of(s: str, default: str = "sync") -> str:
    for role, rx in ROLE_SUFFIX:
        if rx.search(s):
            return role
    return default


def _sendrecv_role(s: str) -> str:
    return "done" if s.lower().split(".", 1)[0].endswith("-done") else "start"


class CategoryInfo(NamedTuple):
    norm: str
    coll_kind: str | None  # category names a collective
    coll_role: str
    coll_is_fusion: bool
    matmul: bool
    kernelish: bool  # custom-call / custom fusion
    async_copy: bool
    generic_async: str  # "start" | "done" | "" (category async-start/-done)


def category_info(category: str) -> CategoryInfo:
    norm = " ".join(category.lower().split())
    kind, role, is_fusion = None, "sync", False
    for k, rx in COLLECTIVE_FUSION_CATEGORIES:
        if rx.match(norm):
            kind, is_fusion = k, True
            break
    if kind is None and norm:
        kind = _kind_of(norm)
        if kind == "send_recv":
            role = _sendrecv_role(norm)
        elif kind is not None:
            role = _role_of(norm)
    ga = GENERIC_ASYNC.match(norm)
    return CategoryInfo(
        norm=norm,
        coll_kind=kind,
        coll_role=role,
        coll_is_fusion=is_fusion,
        matmul=bool(norm and MATMUL_CATEGORIES.match(norm)),
        kernelish=bool(norm and KERNELISH_CATEGORY.match(norm)),
        async_copy=bool(ASYNC_COPY.match(norm)),
        generic_async=(ga.group(1).lower() if ga else ""),
    )


class OpcodeInfo(NamedTuple):
    coll_kind: str | None
    coll_role: str
    matmul: bool
    async_copy: bool
    generic_async: str  # "start" | "done" | "update" | ""
    custom_call: bool


def opcode_info(opcode: str) -> OpcodeInfo:
    kind = _kind_of(opcode) if opcode else None
    if kind == "send_recv":
        role = _sendrecv_role(opcode)
    elif kind == "host_transfer":
        role = "sync"
    else:
        role = _role_of(opcode)
    ga = GENERIC_ASYNC.match(opcode)
    return OpcodeInfo(
        coll_kind=kind,
        coll_role=role,
        matmul=bool(opcode and MATMUL_OPCODES.match(opcode)),
        async_copy=bool(ASYNC_COPY.match(opcode)),
        generic_async=(ga.group(1).lower() if ga else ""),
        custom_call=opcode in ("custom-call", "custom-call-start"),
    )


class NameInfo(NamedTuple):
    hint: bool  # anything below can be true
    async_copy: bool
    offload_role: str  # "offload_start" | "offload_done" | ""
    acf_role: str  # async-collective-start/-done: "start" | "done" | ""
    coll_kind: str | None  # name starts with a collective opcode
    coll_role: str
    kind_in: str | None  # a collective kind anywhere in the name
    gmm: bool
    attn_kernel: str | None  # splash / flash / ragged_paged_attention / pallas
    remat: bool


_EMPTY_NAME = NameInfo(False, False, "", "", None, "sync", None, False, None, False)


_COLL_PREFIXES = ("all-", "reduce-scatter", "ragged-all", "collective-", "send", "recv", "infeed", "outfeed")
_KIND_WORDS = ("gather", "scatter", "reduce", "to-all", "to_all", "permute", "broadcast")


def name_info(name: str) -> NameInfo:
    low = name.lower()
    if not low or not NAME_HINT.search(low):
        return _EMPTY_NAME
    off = OFFLOAD_CALL.search(low) if ".call-" in low else None
    acf = ASYNC_COLLECTIVE_FUSION.match(low) if low.startswith("async-collective-") else None
    kind = _kind_of(low) if low.startswith(_COLL_PREFIXES) else None
    stem = low.split(".", 1)[0]
    role = _sendrecv_role(stem) if kind == "send_recv" else _role_of(stem)
    attn = None
    if "att" in low or "splash" in low:
        for k, rx in ATTENTION_KERNELS:
            if rx.search(low):
                attn = k
                break
        if attn is None and OTHER_ATTENTION_KERNEL_NAME.search(low):
            attn = "pallas"
    return NameInfo(
        hint=True,
        async_copy=low.startswith("copy-") and bool(ASYNC_COPY.match(low)),
        offload_role=(("offload_" + off.group(1)) if off else ""),
        acf_role=(acf.group(1) if acf else ""),
        coll_kind=kind,
        coll_role=role,
        kind_in=(kind_in_text(low) if any(w in low for w in _KIND_WORDS) else None),
        gmm=("gmm" in low) and bool(GMM.search(low)),
        attn_kernel=attn,
        remat=(".remat" in low) and bool(REMAT_NAME.search(low)),
    )


def dims_info(dims: str) -> tuple[int, int]:
    """'1,2048,<=16' -> (elements, number of dims larger than 1)."""
    elems, big = 1, 0
    for d in dims.split(","):
        d = d.strip().lstrip("<=").strip()
        if d.isdigit():
            n = int(d)
            elems *= n
            big += n > 1
    return elems, big


def _arrays(segment: str) -> list[tuple[str, str]]:
    """[(dtype, dims_str)] of every array type written in an HLO segment."""
    return ARRAY.findall(segment) if segment else []


def operand_arrays(segment: str) -> list[tuple[str, str]]:
    """(element type, dims) of the float / int arrays in a text segment
    (pred, s32/u32 indices and flags left out)."""
    return _prec_arrays(segment)


def _prec_arrays(segment: str) -> list[tuple[str, str]]:
    """Like _arrays, only the element types that can decide a precision."""
    return PREC_ARRAY.findall(segment) if segment else []


def op_names(text: str, display: str) -> tuple[str, ...]:
    """The names an op goes by: its instruction name (before ``=`` in the HLO
    text, else the display name), then the display name when it differs."""
    display = display.strip().lstrip("%")
    m = INSTR.match(text)
    name = (m.group(1) if m else "") or display
    return (name,) if name == display or not display else (name, display)


def opcode_end(text: str) -> int:
    """The position right after ``opcode(`` in an HLO text, -1 when not visible (as `Op.op_end`)."""
    m = INSTR.match(text)
    if not m:
        return -1
    om = OPCODE.search(text, m.end() - 1)
    return om.end() if om else -1


class Features:
    """The per-field features of the ops one run classifies, each computed
    once per distinct field value (part of the run's `classify.Memo`)."""

    __slots__ = ("categories", "opcodes", "names", "tf_ops", "views", "tokens", "dim_lists")

    def __init__(self) -> None:
        self.categories: dict[str, CategoryInfo] = {}
        self.opcodes: dict[str, OpcodeInfo] = {}
        self.names: dict[str, NameInfo] = {}
        self.tf_ops: dict[str, TfOpInfo] = {}
        self.views: dict[str, TfOpInfo] = {}
        self.tokens: dict[str, TokenInfo] = {}
        self.dim_lists: dict[str, tuple[int, int]] = {}

    def dims(self, s: str) -> tuple[int, int]:
        v = self.dim_lists.get(s)
        if v is None:
            v = self.dim_lists[s] = dims_info(s)
        return v

    def category(self, s: str) -> CategoryInfo:
        v = self.categories.get(s)
        if v is None:
            v = self.categories[s] = category_info(s)
        return v

    def opcode(self, s: str) -> OpcodeInfo:
        v = self.opcodes.get(s)
        if v is None:
            v = self.opcodes[s] = opcode_info(s)
        return v

    def name(self, s: str) -> NameInfo:
        v = self.names.get(s)
        if v is None:
            v = self.names[s] = name_info(s)
        return v

    def tf_op(self, s: str) -> TfOpInfo:
        v = self.tf_ops.get(s)
        if v is None:
            v = self.tf_ops[s] = tf_op_info(s, self.tokens)
        return v

    def tf_view(self, s: str) -> TfOpInfo:
        """`rules_view` of the name stack `s`."""
        v = self.views.get(s)
        if v is None:
            v = self.views[s] = rules_view(self.tf_op(s))
        return v



#: An instruction number (`fusion.123`, `%param.4`, `.cloned.1`): what tells
#: apart the clones of one op in an unrolled or recompiled program.
NUMBER = re.compile(r"\.[0-9]+")


class Op:
    """One op's parsed identity; heavier features are computed lazily.

    Every excerpt of the op's own strings that a rule writes into a reason
    goes through `quote`, which notes the excerpts that hold an instruction
    number (`numbered`): what lets one classification stand for the op's
    whole family (see `classify.classify_columns`)."""

    def __init__(self, text: str, display: str, category: str, tf_op: str, swl: str,
                 features: Features | None = None):
        f = self.features = features if features is not None else Features()
        self.text = text
        self.display = display.strip().lstrip("%")
        self.cat = f.category(category)
        self.tf = f.tf_view(tf_op)  # the rules see the name stack only through its view
        self.swl = swl
        self.head_end = -1  # end of "name = "
        self.op_end = -1  # position right after "opcode("
        name = opcode = ""
        m = INSTR.match(text)
        if m:
            name = m.group(1)
            self.head_end = m.end()
            om = OPCODE.search(text, m.end() - 1)
            if om:
                opcode = om.group(1)
                self.op_end = om.end()
        self.name = name or self.display
        self.opcode_from_text = bool(opcode)
        if not opcode:
            nm = NAME_OPCODE.match(self.name.lower())
            if nm:
                opcode = nm.group(1)
        self.opcode = opcode
        self.opc = f.opcode(opcode)
        self.names = op_names(text, display)
        self.nis = tuple(f.name(n) for n in self.names)
        self._attrs: str | None = None
        #: The excerpts `quote` gave out that hold an instruction number.
        self.numbered: list[str] = []

    def quote(self, s: str, n: int = 48) -> str:
        """`clip(s, n)`, noting `s` in `numbered` when it holds an instruction number."""
        if "." in s and NUMBER.search(s):
            self.numbered.append(s)
        return clip(s, n)

    @property
    def operand_text(self) -> str:
        """Text after ``opcode(``: operands and attributes ("" if not visible)."""
        return self.text[self.op_end:] if self.op_end >= 0 else ""

    @property
    def operands(self) -> str:
        """The operand list alone (up to the ``)`` that closes ``opcode(``)."""
        t = self.operand_text
        depth = 1
        for i, ch in enumerate(t):
            if ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
                if depth == 0:
                    return t[:i]
        return t

    @property
    def output_text(self) -> str:
        """The output shape(s): from the HLO text, else shape_with_layout."""
        if self.head_end >= 0:
            end = self.op_end if self.op_end >= 0 else len(self.text)
            seg = self.text[self.head_end:end]
            if "[" in seg:
                return seg
        return self.swl

    @property
    def calls(self) -> str:
        """Lowercased target of ``calls=%...`` or ""."""
        i = self.text.find("calls=")
        if i < 0:
            return ""
        m = CALLS.match(self.text, i)
        return m.group(1).lower() if m else ""

    @property
    def attrs(self) -> str:
        """Lowercased attribute tail of the text (custom_call_target=..., backend_config=...)."""
        if self._attrs is None:
            start = max(self.op_end, 0)
            hits = [i for i in (self.text.find(k, start) for k in KERNEL_ATTR_KEYS) if i >= 0]
            self._attrs = self.text[min(hits):].lower() if hits else ""
        return self._attrs

    @property
    def is_async_copy(self) -> bool:
        """copy-start / copy-done by opcode, category or instruction name."""
        return self.opc.async_copy or self.cat.async_copy or any(ni.async_copy for ni in self.nis)

    @property
    def is_kernel_op(self) -> bool:
        """A custom-call / Pallas call (the kernel itself, not a helper op).

        XLA stamps a kernel's ``tf_op`` (``.../pallas_call``) on the layout
        copies it inserts around the call too, so the ``pallas_call`` token
        only counts when the HLO text does not show the opcode.
        """
        if self.opc.custom_call or self.cat.kernelish:
            return True
        if self.opcode_from_text:
            return False
        return self.tf.pallas_last


# --------------------------------------------------------------------------
# Precision
# --------------------------------------------------------------------------
def _pick_precision(segment: str, allow_int: bool, features: Features) -> str | None:
    if not segment:
        return None
    if "f8e" in segment and any(d.startswith("f8e") for d, _ in PREC_ARRAY.findall(segment)):
        return "fp8"
    arrays = _prec_arrays(segment)
    if not arrays:
        return None
    dtypes = {d for d, _ in arrays}
    matrix = {d for d, dims in arrays if features.dims(dims)[1] >= 2}
    for pool in (matrix, dtypes):
        if allow_int and pool & INT8:
            return "int8"
        if "bf16" in pool:
            return "bf16"
        if "f16" in pool:
            return "f16"
        if "f32" in pool:
            return "f32"
    return None


def matmul_precision(op: Op, allow_int: bool = True) -> tuple[str | None, str]:
    """(precision, where) -- see the module docstring for the rule."""
    p = _pick_precision(op.operand_text, allow_int, op.features)
    if p:
        return p, "operands"
    if op.swl and "f8e" in op.swl.lower():
        return "fp8", "shape_with_layout"
    p = _pick_precision(op.output_text, allow_int, op.features)
    if p:
        return p, "output type"
    return None, "no element type"


def matmul_bucket(precision: str | None) -> str:
    if precision == "fp8":
        return "matmul_fp8"
    if precision == "bf16":
        return "matmul_bf16"
    if precision == "int8":
        return "matmul_int8"
    return "matmul_other"


def public_precision(p: str | None) -> str | None:
    return p if p in PRECISIONS else None


def infer_kind_from_buffers(segment: str, features: Features) -> tuple[str | None, str]:
    """Continuation fusion buffers: (shard, full, ...) -> kind.

    The first two arrays with more than 2 elements are the buffers (the
    scalar u32 sync flags and the s32[2] counter are skipped)."""
    bufs = []
    for d, dims in _arrays(segment):
        n = features.dims(dims)[0]
        if dims.strip() and n > 2:
            bufs.append((d.lower(), n))
            if len(bufs) == 2:
                break
    if len(bufs) < 2 or bufs[0][0] != bufs[1][0]:
        return None, "buffers not visible"
    a, b = bufs[0][1], bufs[1][1]
    if b > a:
        return "all_gather", f"buffer grows x{b / a:g}"
    if b < a:
        return "reduce_scatter", f"buffer shrinks x{a / b:g}"
    return "all_reduce", "buffers equal"


def shape_dims(dims: str) -> tuple[int, ...]:
    return tuple(int(d) for d in (x.strip() for x in dims.split(",")) if d.isdigit())


def array_bytes(text: str) -> int:
    """The bytes of the arrays an HLO operand or output text prints (element widths from the HLO model)."""
    from profanalyzer.read.hlo.model import DTYPE_BITS

    return sum((math.prod(shape_dims(d)) * DTYPE_BITS.get(t, 0) + 7) // 8 for t, d in ARRAY.findall(text or ""))


def matmul_kernel_flops(operand_text: str, output_text: str) -> float | None:
    """2*M*N*K of a matmul kernel from its operand and output shapes as HLO text prints them
    (profanalyzer.read.hlo.kernels.matmul_flops says how)."""
    from profanalyzer.read.hlo.kernels import matmul_flops

    return matmul_flops([(t, shape_dims(d)) for t, d in ARRAY.findall(operand_text or "")],
                        [shape_dims(d) for _, d in ARRAY.findall(output_text or "")])


def braced_attr(text: str, key: str, limit: int = 4096) -> str:
    """The content of ``key={...}`` in an HLO text (balanced braces; "" if
    absent or unbalanced within `limit` characters). Used for
    ``operand_layout_constraints={...}`` and ``kernel_metadata={...}``."""
    i = text.find(key + "={")
    if i < 0:
        return ""
    start = i + len(key) + 2
    depth = 1
    for j in range(start, min(len(text), start + limit)):
        ch = text[j]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[start:j]
    return ""


def kernel_operand_shapes(op: Op) -> tuple[str, str]:
    """(typed operand text, where) of a custom call: the operand list when it
    prints element types (XProf's HLO text), else the
    ``operand_layout_constraints`` (an optimized module prints bare operand
    names, the constraints keep one typed shape per operand)."""
    seg = op.operands
    if ARRAY.search(seg):
        return seg, "operand shapes"
    seg = braced_attr(op.text, "operand_layout_constraints")
    if ARRAY.search(seg):
        return seg, "operand layout constraints"
    return "", "no operand types"


def elementwise_shapes(operand_text: str, output_text: str) -> bool:
    """Every matrix operand has the output's shape: an elementwise kernel
    (a square matmul would look the same, so shapes alone do not decide)."""
    out = [shape_dims(d) for _, d in ARRAY.findall(output_text or "")]
    mats = [shape_dims(d) for _, d in ARRAY.findall(operand_text or "") if sum(x > 1 for x in shape_dims(d)) >= 2]
    return bool(out and mats) and all(m == out[0] for m in mats)
