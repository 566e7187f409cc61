"""Attention over a KV cache, decided from the program, never from a name.

A decode step's attention is two contractions over the cache: q.K (scores
over the cache's positions) and p.V (the positions reduced). The compiler
emits them as convolution fusions, as dots, or (small batches) as loop
fusions that multiply and reduce; none carries an attention scope the
classifier can trust. What the program does show is the cache itself: a
state buffer (an entry parameter's array, or one layer's slice of a stacked
one) that the step updates with a `dynamic-update-slice` whose update is one
position wide (extent 1 on an axis of at least MIN_POSITIONS positions), or
with a `scatter` writing at most 1/MIN_POSITIONS of it (a paged cache: one
slot of each sequence's current page).

An op is attention over the cache when it contracts such a buffer: a top-level
`dot` / `convolution`, or a fusion whose body holds a dot or convolution or
multiplies and reduces, or a custom call (a paged / ragged attention kernel),
reading a cache-updated array of at least MIN_CACHE_BYTES with an output
smaller than that array (it reduces it). The array is followed back through
bitcasts, tuple elements, copies, transposes and gathers (a fusion that only
moves data counts as one: its largest operand): a paged cache gathered into a
contiguous buffer is still the cache. Kernels keep their classification (the
kernel is attention already); their cache reads count in `decode_cache`.
"""

from __future__ import annotations

from profanalyzer.analyze.antipatterns import squeezed, state_arrays
from profanalyzer.model.analysis import DecodeCache
from profanalyzer.read.hlo.kernels import is_concatenation
from profanalyzer.read.hlo.model import Computation, Instruction, Module
from profanalyzer.read.hlo.schedule import operand_shapes

__all__ = ["cache_contractions", "decode_cache", "cache_attention_rows", "MIN_CACHE_BYTES",
           "MIN_POSITIONS"]

#: A cache smaller than this is not a KV cache worth the name.
MIN_CACHE_BYTES = 1 << 20
#: The position axis a one-wide update writes into has at least this many positions.
MIN_POSITIONS = 64

_PASS = frozenset({"bitcast", "get-tuple-element", "copy", "reshape", "copy-start", "copy-done", "transpose",
                   "async-start", "async-done"})
_CONTRACT = frozenset({"dot", "convolution"})
#: a fusion whose body holds only these moves data (a gather of pages, a relayout): it passes its largest operand on
_MOVES = frozenset({"parameter", "constant", "bitcast", "reshape", "transpose", "copy", "gather", "slice",
                    "dynamic-slice", "broadcast", "iota", "get-tuple-element", "tuple", "concatenate", "clamp",
                    "compare", "select", "custom-call", "convert"})


def _one_position_update(ins: Instruction, comp) -> bool:
    """A dynamic-update-slice writing one position of a large state array, or a scatter writing a sliver of
    one (at most 1/MIN_POSITIONS of its elements: a slot per sequence of a paged cache)."""
    if ins.opcode == "scatter":
        shapes = operand_shapes(ins, comp)
        if len(shapes) < 3 or shapes[0].is_tuple or shapes[2].is_tuple:
            return False
        return shapes[0].bytes >= MIN_CACHE_BYTES and shapes[2].elements * MIN_POSITIONS <= shapes[0].elements
    if ins.opcode != "dynamic-update-slice":
        return False
    shapes = operand_shapes(ins, comp)
    if len(shapes) < 2 or shapes[0].is_tuple or shapes[1].is_tuple:
        return False
    target, update = shapes[0], shapes[1]
    if target.bytes < MIN_CACHE_BYTES or len(target.dims) != len(update.dims):
        return False
    return any(u == 1 and t >= MIN_POSITIONS for t, u in zip(target.dims, update.dims, strict=True))


def _body_has(module: Module, ins: Instruction, pred, depth: int = 0) -> bool:
    if depth > 4:
        return False
    for name in ins.called:
        comp = module.by_name.get(name)
        for i in comp.instructions if comp is not None else ():
            if pred(i, comp) or (i.opcode in ("fusion", "call") and _body_has(module, i, pred, depth + 1)):
                return True
    return False


def _contracts(module: Module, ins: Instruction) -> bool:
    """A dot or convolution, a custom call (a kernel: what it reads decides), or a fusion whose body (nested
    calls included) holds one or multiplies and reduces."""
    from profanalyzer.read.hlo.schedule import fusion_body

    if ins.opcode in _CONTRACT or ins.opcode == "custom-call":
        return True
    if ins.opcode != "fusion" or not ins.called:
        return False
    body = fusion_body(module, ins.called[0])
    return body.has_matmul or {"multiply", "reduce"} <= set(body.opcodes)


def _read_bytes(module: Module, ins: Instruction, k: int, whole: int) -> int:
    """The bytes a fusion reads of its operand k: a (dynamic) slice's (one layer of a stacked cache) when its
    body only slices it, else the whole operand."""
    if ins.opcode != "fusion" or not ins.called:
        return whole
    comp = module.by_name.get(ins.called[0])
    if comp is None:
        return whole
    param = next((i.name for i in comp.instructions if i.opcode == "parameter" and i.parameter_number == k), None)
    names = {param} if param else set()
    for i in comp.instructions:  # the parameter through bitcasts
        if i.opcode in ("bitcast", "reshape") and i.operands and i.operands[0] in names:
            names.add(i.name)
    users = [i for i in comp.instructions if any(o in names for o in i.operands) and i.name not in names]
    if users and all(u.opcode in ("dynamic-slice", "slice") for u in users):
        return min(whole, sum(u.shape.bytes for u in users))
    return whole


def cache_contractions(module: Module) -> dict[str, tuple[str, str, int]]:
    """Instruction name -> (why, the cache's element type, the cache bytes one run reads from HBM), for
    every op of the module that contracts a KV cache."""
    states = state_arrays(module)
    if not states:
        return {}
    producers: dict[str, tuple[Instruction, Computation]] = {}
    for comp in module.computations:
        for ins in comp.instructions:
            producers[ins.name] = (ins, comp)
    cache: dict[str, str] = {}  # instruction name -> the cache update it carries
    for name, (ins, comp) in producers.items():
        if (ins.shape.dtype, squeezed(ins.shape.dims)) not in states and not ins.shape.is_tuple:
            continue
        if _one_position_update(ins, comp) or (
                ins.opcode == "fusion" and _body_has(module, ins, _one_position_update)):
            cache[name] = name

    def moves(ins: Instruction, comp: Computation) -> bool:
        if ins.opcode == "gather":
            return True
        if not ins.shape.is_tuple and is_concatenation(ins, comp):  # pieces put back together (async slices)
            return True
        if ins.opcode != "fusion" or not ins.called:
            return False
        body = module.by_name.get(ins.called[0])
        return body is not None and all(i.opcode in _MOVES for i in body.instructions) and any(
            i.opcode in ("gather", "transpose", "copy") for i in body.instructions)

    def largest_operand(ins: Instruction, comp: Computation):
        shapes = operand_shapes(ins, comp)
        k = max(range(len(shapes)), key=lambda j: (0 if shapes[j].is_tuple else shapes[j].bytes, -j), default=0)
        return (ins.operands[k] if k < len(ins.operands) else ins.operands[0]), (shapes[k] if k < len(shapes) else None)

    def cache_of(name: str, hops: int = 8) -> tuple[str | None, int | None]:
        """(the cache the array is, the bytes the step reads of it from HBM on the way there: the first
        array along the way that lives in HBM (a gather's pages, the state a copy into VMEM starts from);
        None when none does)."""
        read: int | None = None
        for _ in range(hops):
            got = producers.get(name)
            if got is None or not got[0].operands:
                return cache.get(name), read
            ins, comp = got
            if name in cache or moves(ins, comp):  # the data it moves or updates: its largest operand
                src, shape = largest_operand(ins, comp)
                if read is None and shape is not None and not shape.is_tuple and shape.memory_space == 0:
                    out_b = sum(leaf.bytes for leaf in ins.shape.leaves())
                    read = min(shape.bytes, out_b) if name not in cache else shape.bytes
                if name in cache:
                    return cache[name], read
                name = src
            elif ins.opcode in _PASS:
                name = ins.operands[0]
            else:
                return None, None
        return cache.get(name), read

    out: dict[str, tuple[str, str, int]] = {}
    for name, (ins, comp) in producers.items():
        if name in cache or not _contracts(module, ins):
            continue
        shapes = operand_shapes(ins, comp)
        hits: list[tuple[str, str, int]] = []
        for op_name, shape in zip(ins.operands, shapes, strict=False):
            src, moved = cache_of(op_name)
            if src is None or shape.is_tuple or shape.bytes < MIN_CACHE_BYTES:
                continue
            if sum(leaf.elements for leaf in ins.shape.leaves()) >= shape.elements:  # it does not reduce the cache
                continue
            # what the contraction consumes of the cache (one layer's slice of a stacked one), wherever it was
            # staged: a state lives in HBM between steps, so a VMEM copy was read from there for this read;
            # a gather on the way reads the pages it gathers
            nbytes = _read_bytes(module, ins, ins.operands.index(op_name), shape.bytes)
            if moved is not None:
                nbytes = min(nbytes, moved)
            hits.append((f"{src} ({shape.dtype}[{','.join(map(str, shape.dims))}])", shape.dtype, nbytes))
        if hits:  # a kernel reads K and V: both count
            out[name] = (f"contracts the KV cache {' and '.join(h[0] for h in hits)}, updated a position per step: "
                         "attention over the cache", hits[0][1], sum(h[2] for h in hits))
    return out


def cache_attention_rows(work, found: dict[str, tuple[str, str, int]]) -> dict[str, dict[int, tuple]]:
    """plane label -> {metadata row: (bucket, kernel, precision, reason, attention part)} of the ops
    that contract a KV cache (`found`: cache_contractions of the program), unless classified as an
    attention kernel or its layout ops: they move to the attention bucket's decode part (the re-bucketing
    that `attribution.attribute_trace` applies)."""
    if not found:
        return {}
    out: dict[str, dict[int, tuple]] = {}
    for w in work:
        cols = w.classes.columns
        rows: dict[int, tuple] = {}
        for i, short in enumerate(w.plane.meta.short_names):
            why = found[short][0] if short in found else None
            part = cols["attention_part"][i] if "attention_part" in cols else None
            if why is None or part in ("kernel", "layout") or cols["collective"][i] is not None:
                continue
            rows[i] = ("attention", cols["kernel"][i], cols["precision"][i],
                       f"{why} (was {cols['bucket'][i]}: {cols['reason'][i]})", "decode")
        if rows:
            out[w.plane.label] = rows
    return out


def decode_cache(module: Module | None, found: dict[str, tuple[str, str, int]],
                 attention_decode_ps: float, hbm_bytes_per_s: float = 0.0) -> DecodeCache | None:
    """What the step's attention over its KV cache reads (`found`: cache_contractions of the program): the
    cache's element types and the bytes the contractions read per step (each run counted, loops by their
    trip counts), beside their time."""
    if module is None or attention_decode_ps <= 0 or not found:
        return None
    from profanalyzer.read.hlo.schedule import schedule

    runs: dict[str, int] = {}
    for r in schedule(module):
        if r.name in found:
            runs[r.name] = runs.get(r.name, 0) + max(1, r.count)
    nbytes = sum(found[n][2] * runs.get(n, 1) for n in found)
    if nbytes <= 0:
        return None  # the cache is read from VMEM copies: no HBM read to halve
    floor = nbytes / hbm_bytes_per_s * 1e12 if hbm_bytes_per_s > 0 else 0.0
    return DecodeCache(dtypes=tuple(sorted({d for _w, d, _b in found.values()})), bytes_per_step=float(nbytes),
                       ps=float(attention_decode_ps), contractions=len(found),
                       staged=floor > attention_decode_ps * 1.02)
