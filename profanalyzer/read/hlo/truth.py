"""Each scheduled instruction's time bucket (profanalyzer.core.vocab.BUCKETS) from
the HLO alone: its opcode, its fusion body, element types, execution thread,
custom-call target and metadata -- never from the trace classifier, so the
two can be compared (tests/test_hlo_truth.py).

Decisions (`Truth.reason` says which applied):

* values, not work (parameter, constant, tuple, bitcast, ...): no bucket;
* an async start / update / done takes the kind of what its async
  computation runs (followed through calls): a collective -> that
  collective's bucket, anything else (a layout copy, a data-format call, an
  embedding gather/scatter offloaded to the SparseCore) -> other_compute;
* collective opcodes (sync or `-start`/`-done`) -> their bucket; a
  collective-permute inside the compiler's windowed-einsum loop (the loop
  body the SPMD partitioner names `windowed_dot_general_body_ag` /
  `_rs`) is the all-gather / reduce-scatter of a collective matmul;
* copies (sync or async) of a host-memory buffer (memory space 5) ->
  host_offload; other copies -> other_compute;
* Pallas kernels (`tpu_custom_call`) and every op under an attention
  kernel's name-stack scope -> attention; Megablox gmm kernels -> matmul;
* a dot / convolution, or a fusion holding one -> the matmul bucket of its
  operand element types (any fp8 -> matmul_fp8; int8 x int8 -> matmul_int8;
  bf16 -> matmul_bf16; else matmul_other);
* the rest -> other_compute.

`category(row)` is the `hlo_category` a trace of this program would carry
for the op (what the TPU runtime writes on an XLA Ops event): an
approximation from the same facts, used to build the classifier's inputs and
the replayed capture.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from profanalyzer.core.vocab import COLLECTIVE_KIND_BUCKET
from profanalyzer.read.hlo.model import (
    FP8_DTYPES,
    INT4_DTYPES,
    INT8_DTYPES,
    Instruction,
    Module,
)
from profanalyzer.read.hlo.schedule import ScheduledOp, fusion_body, operand_shapes

__all__ = ["Truth", "hlo_bucket", "category", "category_of", "collective_kind", "WINDOWED_LOOP"]

#: The SPMD partitioner's windowed-einsum (collective matmul) loop bodies.
WINDOWED_LOOP = re.compile(r"windowed_dot_general_body_(ag|rs)")
_WINDOWED_KIND = {"ag": "all_gather", "rs": "reduce_scatter"}
_COLLECTIVE_OPCODES = (
    ("reduce_scatter", re.compile(r"^(?:all-)?reduce-scatter(?:-start|-done)?$")),
    ("all_to_all", re.compile(r"^(?:ragged-)?all-to-all(?:-start|-done)?$")),
    ("all_gather", re.compile(r"^all-gather(?:-start|-done)?$")),
    ("all_reduce", re.compile(r"^all-reduce(?:-start|-done)?$")),
    ("collective_permute", re.compile(r"^collective-(?:permute|broadcast)(?:-start|-done)?$")),
    ("send_recv", re.compile(r"^(?:send|recv)(?:-done)?$")),
    ("host_transfer", re.compile(r"^(?:infeed|outfeed)$")),
)
#: Name-stack scopes of attention kernels (Pallas splash / flash / ragged paged attention).
ATTENTION_SCOPE = re.compile(r"splash_attention|splash_m[hq]a|flash_attention|ragged_paged_attention|"
                             r"paged_attention|dot_product_attention", re.I)
GMM_SCOPE = re.compile(r"(?:^|/)jit\((?:gmm|tgmm)\)|(?:^|[/_])t?gmm(?:_v2)?(?:[-/]|$)", re.I)
HOST_MEMORY = 5
_DATA_FORMATTING = frozenset({"copy", "transpose", "reshape", "bitcast", "pad", "slice", "concatenate",
                              "dynamic-slice", "reverse"})
_ELEMENTWISE = frozenset({"add", "subtract", "multiply", "divide", "maximum", "minimum", "and", "or", "xor", "not",
                          "negate", "abs", "exponential", "log", "sqrt", "rsqrt", "power", "select", "clamp",
                          "compare", "convert", "sine", "cosine", "tanh", "logistic", "floor", "ceil", "remainder",
                          "sign", "shift-left", "shift-right-logical", "shift-right-arithmetic"})


@dataclass(frozen=True)
class Truth:
    bucket: str | None  # None: not an op with time (a value)
    collective: str | None  # collective kind (profanalyzer.core.vocab COLLECTIVE_TYPES) or None
    reason: str


def collective_kind(opcode: str) -> str | None:
    for kind, rx in _COLLECTIVE_OPCODES:
        if rx.match(opcode):
            return kind
    return None


def _runs(module: Module, comp_name: str, depth: int = 0) -> tuple[str | None, str]:
    """(collective kind or None, what) that an async computation ultimately runs."""
    comp = module.by_name.get(comp_name)
    if comp is None or depth > 6:
        return None, "unknown computation"
    root = comp.root
    for ins in ([root] if root is not None else []) + [i for i in comp.instructions if i is not root]:
        kind = collective_kind(ins.opcode)
        if kind:
            return kind, ins.opcode
        if ins.opcode in ("call", "async-start", "fusion") and ins.called and ins is root:
            got = _runs(module, ins.called[0], depth + 1)
            if got[0]:
                return got
    return None, (root.opcode if root is not None else "empty") + (f" {root.custom_call_target}" if root is not None
                                                                    and root.custom_call_target else "")


def _async_start(module: Module, row: ScheduledOp) -> Instruction | None:
    """The async-start a done/update row belongs to (through its operand chain)."""
    ins = row.instruction
    seen = 0
    while ins.opcode in ("async-update", "async-done") and ins.operands and seen < 8:
        nxt = None
        for c in module.computations:
            got = c.by_name.get(ins.operands[0])
            if got is not None and got.opcode.startswith("async-"):
                nxt = got
                break
        if nxt is None:
            return None
        ins, seen = nxt, seen + 1
    return ins if ins.opcode == "async-start" else None


def _windowed(module: Module, ins: Instruction) -> str | None:
    """ag / rs when `ins` is a while whose body is a windowed-einsum loop."""
    if ins.opcode != "while":
        return None
    m = WINDOWED_LOOP.search(ins.attr("body"))
    return m.group(1) if m else None


def _ring_kind(module: Module, row: ScheduledOp) -> tuple[str, str] | None:
    """(kind, why) when a collective-permute is a hop of a collective-matmul
    ring: inside the windowed loop's body; or outside it (the hop the
    compiler pipelined out of the loop), when its data comes out of such a
    loop (through copies / bitcasts), or when a windowed loop of the same
    computation carries a buffer of the permuted shape."""
    m = WINDOWED_LOOP.search(row.computation)
    if m:
        return _WINDOWED_KIND[m.group(1)], f"in the loop {row.computation}"
    comp = module.by_name.get(row.computation)
    if comp is None:
        return None
    ins = row.instruction
    if ins.opcode.endswith("-done"):  # the start it completes decides
        start = comp.by_name.get(ins.operands[0]) if ins.operands else None
        if start is None:
            return None
        ins = start
    name = ins.operands[0] if ins.operands else ""
    for _ in range(6):
        src = comp.by_name.get(name)
        if src is None:
            break
        w = _windowed(module, src)
        if w:
            return _WINDOWED_KIND[w], f"on the result of the loop {src.name}"
        if src.opcode not in ("copy-done", "copy-start", "copy", "bitcast", "get-tuple-element") or not src.operands:
            break
        name = src.operands[0]
    shard = ins.shape.parts[0] if ins.shape.is_tuple and ins.shape.parts else ins.shape
    for other in comp.instructions:
        w = _windowed(module, other)
        if not w or not other.operands:
            continue
        init = comp.by_name.get(other.operands[0])
        carried = init.shape.leaves() if init is not None else ()
        if any(s.dims == shard.dims and s.dtype == shard.dtype for s in carried):
            return _WINDOWED_KIND[w], f"carrying the {shard.dtype}{list(shard.dims)} shard the loop {other.name} rings"
    return None


def _matmul_bucket(dtypes: tuple[str, ...]) -> tuple[str, str]:
    ds = set(dtypes)
    if ds & FP8_DTYPES:
        return "matmul_fp8", "fp8 operands"
    if ds and ds <= (INT8_DTYPES | INT4_DTYPES):
        return "matmul_int8", "int8 operands"
    if "bf16" in ds:
        return "matmul_bf16", "bf16 operands"
    return "matmul_other", f"{'/'.join(sorted(ds)) or 'unknown'} operands"


def _is_host_copy(ins: Instruction) -> bool:
    return any(s.memory_space == HOST_MEMORY for s in ins.shape.leaves())


def hlo_bucket(module: Module, row: ScheduledOp, operand_spaces: tuple[int, ...] = ()) -> Truth:
    ins = row.instruction
    op = ins.opcode
    if row.trivial:
        return Truth(None, None, f"'{op}' names a value")
    if op in ("while", "call", "conditional"):
        return Truth(None, None, f"'{op}': its computations are rows of their own")
    if op in ("async-start", "async-update", "async-done"):
        start = ins if op == "async-start" else _async_start(module, row)
        if start is None or not start.called:
            return Truth("other_compute", None, f"'{op}' without a known start")
        kind, what = _runs(module, start.called[0])
        thread = start.async_execution_thread or "main"
        if not kind and (_is_host_copy(start) or HOST_MEMORY in _operand_spaces(module, row.computation, start)):
            return Truth("host_offload", None, f"async {op[6:]} of {what} moving a host-memory (S(5)) buffer")
        if kind:
            return Truth(COLLECTIVE_KIND_BUCKET.get(kind, "other_collective"), kind,
                         f"async {op[6:]} of a {what} on thread {thread}")
        return Truth("other_compute", None, f"async {op[6:]} of {what} on thread {thread}: not a collective")
    kind = collective_kind(op)
    if kind:
        if kind == "collective_permute":
            ring = _ring_kind(module, row)
            if ring is not None:
                k, why = ring
                return Truth(COLLECTIVE_KIND_BUCKET[k], k, f"{op} {why}: the {k} of a collective matmul (windowed einsum)")
        return Truth(COLLECTIVE_KIND_BUCKET.get(kind, "other_collective"), kind, f"collective opcode '{op}'")
    name_stack = ins.metadata.op_name
    if ATTENTION_SCOPE.search(name_stack) and op != "copy-start" and op != "copy-done" and not _is_host_copy(ins):
        return Truth("attention", None, f"'{op}' under an attention kernel's name-stack scope")
    if op in ("copy", "copy-start", "copy-done"):
        spaces = operand_spaces or _operand_spaces(module, row.computation, ins)
        if _is_host_copy(ins) or HOST_MEMORY in spaces:
            return Truth("host_offload", None, f"'{op}' of a host-memory (S(5)) buffer")
        return Truth("other_compute", None, f"'{op}': an HBM/VMEM copy")
    if op == "custom-call":
        target = ins.custom_call_target
        if target.startswith("PrepareAsyncCall"):
            got = _prepared(module, row)
            if got is not None:
                return got
        if target == "tpu_custom_call":
            if ATTENTION_SCOPE.search(name_stack) or ATTENTION_SCOPE.search(ins.name):
                return Truth("attention", None, "Pallas attention kernel (tpu_custom_call under an attention scope)")
            if GMM_SCOPE.search(name_stack) or GMM_SCOPE.search(ins.name):
                b, why = _matmul_bucket(row.operand_dtypes)
                return Truth(b, None, f"Megablox grouped matmul kernel, {why}")
            return Truth("other_compute", None, "other Pallas kernel")
        if ATTENTION_SCOPE.search(name_stack):
            return Truth("attention", None, f"custom-call {target} under an attention kernel scope")
        return Truth("other_compute", None, f"custom-call {target}")
    if ATTENTION_SCOPE.search(name_stack):
        return Truth("attention", None, "under an attention kernel's name-stack scope")
    if op in ("dot", "convolution", "ragged-dot"):
        b, why = _matmul_bucket(row.operand_dtypes)
        return Truth(b, None, f"'{op}', {why}")
    if op == "fusion" and row.body is not None:
        k2, c_op = _fused_collective(module, row)
        if k2:
            return Truth(COLLECTIVE_KIND_BUCKET.get(k2, "other_collective"), k2, f"fusion holding {c_op}")
        if row.body.dots:
            dts = tuple(d for _, ds, _ in row.body.dots for d in ds)
            b, why = _matmul_bucket(dts)
            return Truth(b, None, f"{ins.fusion_kind} fusion holding {row.body.dots[0][0]}, {why}")
        return Truth("other_compute", None, f"{ins.fusion_kind} fusion without a dot/convolution")
    return Truth("other_compute", None, f"'{op}'")


def _operand_spaces(module: Module, comp_name: str, ins: Instruction) -> tuple[int, ...]:
    comp = module.by_name.get(comp_name)
    if comp is None:
        return ()
    return tuple(s.memory_space for s in operand_shapes(ins, comp) for s in s.leaves())


def _prepared(module: Module, row: ScheduledOp) -> Truth | None:
    """A PrepareAsyncCallStart / -Done custom call: the TensorCore's set-up of
    the async call its result feeds (through the Done); that call's kind."""
    comp = module.by_name.get(row.computation)
    if comp is None:
        return None
    name = row.instruction.name
    for _ in range(3):
        user = next((i for i in comp.instructions if name in i.operands), None)
        if user is None:
            return None
        if user.opcode in ("async-start", "call-start") and user.called:
            kind, what = _runs(module, user.called[0])
            if kind:
                return Truth(COLLECTIVE_KIND_BUCKET.get(kind, "other_collective"), kind,
                             f"custom-call {row.instruction.custom_call_target}: prepares the async {what} "
                             f"%{user.name} (on thread {user.async_execution_thread or 'main'})")
            return Truth("other_compute", None, f"custom-call {row.instruction.custom_call_target}: prepares the "
                                                f"async {what} %{user.name}, not a collective")
        name = user.name
    return None


def _fused_collective(module: Module, row: ScheduledOp) -> tuple[str | None, str]:
    """(kind, opcode) of a collective inside a fusion's body; an all-reduce
    whose fusion returns less than it reduces (each partition keeps its
    slice: the compiler's all-reduce-scatter) is a reduce-scatter."""
    body = row.body
    if body is None:
        return None, ""
    for c_op in body.opcodes:
        k = collective_kind(c_op)
        if not k:
            continue
        if k == "all_reduce":
            comp = module.by_name.get(row.computation)
            ins_b = sum(s.bytes for s in operand_shapes(row.instruction, comp)) if comp is not None else 0
            if 0 < row.instruction.shape.bytes < ins_b:
                return "reduce_scatter", f"{c_op} of which it keeps a slice (an all-reduce-scatter)"
        return k, c_op
    return None, ""


_FUSION_CATEGORY = {"kLoop": "loop fusion", "kInput": "input fusion", "kOutput": "output fusion",
                    "kCustom": "custom fusion"}


def _plain_category(ins: Instruction) -> str:
    """The category of an op that holds no dot or collective: fusions by
    kind, dots and convolutions, layout ops, elementwise ops, else the opcode."""
    op = ins.opcode
    if op == "fusion":
        return _FUSION_CATEGORY.get(ins.fusion_kind, "fusion")
    if op in ("dot", "convolution"):
        return "convolution"
    if op in _DATA_FORMATTING:
        return "data formatting"
    if op in _ELEMENTWISE:
        return "non-fusion elementwise"
    return op


def category_of(module: Module, ins: Instruction, comp_name: str = "") -> str:
    """The `hlo_category` a trace would carry for `ins` (an approximation
    of XProf's: a fusion holding a dot is a convolution fusion, one holding a
    collective is named for it, other fusions by kind, copies and layout ops
    data formatting, elementwise ops non-fusion elementwise)."""
    op = ins.opcode
    if op == "fusion":
        body = fusion_body(module, ins.called[0]) if ins.called else None
        if body is not None and body.dots:
            return "convolution fusion"
        if body is not None:
            row_kind = None
            for c_op in body.opcodes:
                if collective_kind(c_op):
                    row_kind = c_op
                    break
            if row_kind:
                comp = module.by_name.get(comp_name)
                ins_b = sum(s.bytes for s in operand_shapes(ins, comp)) if comp is not None else 0
                if row_kind.startswith("all-reduce") and 0 < ins.shape.bytes < ins_b:
                    return "all-reduce-scatter fusion"
                return f"{row_kind.removesuffix('-start')} fusion"
    return _plain_category(ins)


def category(row: ScheduledOp, module: Module | None = None) -> str:
    """The op's `hlo_category` as a trace would carry it (an approximation)."""
    if module is not None:
        return category_of(module, row.instruction, row.computation)
    ins = row.instruction
    op = ins.opcode
    if op == "fusion" and row.body is not None and row.body.dots:
        return "convolution fusion"
    return _plain_category(ins)

