"""The work of custom-call kernels from the program, for the capture's analysis and the replay alike.

Attention kernels: FLOPs from q/k/v shapes and the mask.

A Pallas attention kernel (splash / flash, forward and backward halves) is a
custom call the compiler gives no FLOP count. Its work follows from its
operands and the mask it skips blocks by:

- q, k, v: the custom call's first three floating-point arrays of one rank
  whose last (head) dimension agrees: q [.., Hq, Sq, D], k and v [.., Hkv, Skv, D];
- the half it computes, from its array outputs of q's element type: the
  forward takes q, k, v (3 such operands) and writes o; the backward takes
  q, k, v and dO (4) and writes dq (1 output) or dk and dv (2). Per unmasked
  (q, k) pair and head dimension the forward does 2 matmuls (S = QK^T, O = PV),
  4 FLOPs; the dq half 3 (S, dP = dO V^T, dQ = dS K), 6 FLOPs; the dk/dv half 4
  (S, dP, dV = P^T dO, dK = dS^T Q), 8 FLOPs;
- the share of (q block, kv block) pairs it computes: the block mask, a constant
  of 8-bit integers with values in {0, 1, 2} (skip, partial, full) and shape
  [.., Sq / block_q, Skv / block_kv] for the block sizes the kernel's metadata
  states (splash's `block_q`, `block_kv`; `_dq`, `_dkv` for the backward halves);
  a partial block is computed whole. A causal mask computes about half the pairs.
  A block mask whose values the program does not carry (a capture's
  `/host:metadata` HloProto holds no constant's literal; an XLA dump's proto
  does) leaves the FLOPs unknown: counting every pair would overstate them.
  With no mask-shaped constant at all, every pair is computed.

A paged decode kernel reads its keys from page pools: q [B, H, 1, D] (one
query per sequence and head), k and v pools [Hkv, pages, page size, D] of the
same shape, and an integer page table of B x pages-per-sequence entries. Each
sequence's keys are its table's pages x page size; the lengths that stop it
early are runtime values, so the FLOPs count every page the table holds (an
upper bound, said so).
"""

from __future__ import annotations

import math
import re

from profanalyzer.read.hlo.model import Computation, Instruction, Module
from profanalyzer.read.hlo.schedule import operand_shapes

__all__ = ["MaskTable", "attention_kernel_flops", "attention_kernel_work", "attention_work", "is_concatenation",
           "matmul_flops", "kernel_flops", "kernel_bytes"]

_FLOAT = ("bf16", "f16", "f32", "f8e4m3fn", "f8e5m2")
_BLOCK = re.compile(r'\\?"(block_(?:q|kv)(?:_dq|_dkv)?)\\?"\s*:\s*(\d+)')
#: FLOPs per (q, k) pair and head dimension of each half
_PER_PAIR = {"forward": 4, "dq": 6, "dkv": 8}


def _block_sizes(ins: Instruction) -> dict[str, int]:
    return {k: int(v) for k, v in _BLOCK.findall(ins.text or "")}


def _masks(module: Module) -> dict[tuple[int, int], list[float]]:
    """(q blocks, kv blocks) -> computed-pair fractions of the block-mask constants of that shape
    (NaN for an 8-bit integer constant of that shape whose values the program does not carry)."""
    out: dict[tuple[int, int], list[float]] = {}
    for comp in module.computations:
        for ins in comp.instructions:
            st = ins.literal_stats
            if ins.opcode != "constant" or len(ins.shape.dims) < 2 or ins.shape.dtype not in ("s8", "u8"):
                continue
            if len(st) != 4:
                out.setdefault((ins.shape.dims[-2], ins.shape.dims[-1]), []).append(float("nan"))
                continue
            n, nonzero, lo, hi = st
            if lo < 0 or hi > 2 or hi == 0:
                continue
            nq, nkv = ins.shape.dims[-2], ins.shape.dims[-1]
            lead = n // max(1, nq * nkv)
            out.setdefault((nq, nkv), []).append(nonzero / max(1, lead * nq * nkv))
    return out


class MaskTable:
    """A module's block-mask constants (`_masks`), read on first use and once per module."""

    def __init__(self, module: Module) -> None:
        self.module = module
        self._masks: dict[tuple[int, int], list[float]] | None = None

    def get(self) -> dict[tuple[int, int], list[float]]:
        if self._masks is None:
            self._masks = _masks(self.module)
        return self._masks


def attention_kernel_work(module: Module, names: set[str]) -> dict[str, dict]:
    """Instruction name -> its work (half, heads, seq_q, seq_kv, head_dim, block_q, block_kv, dense_flops,
    computed_fraction (None: the mask's values are not in the program), how) for the named attention
    kernel custom calls."""
    masks = MaskTable(module)
    out: dict[str, dict] = {}
    for comp in module.computations:
        for ins in comp.instructions:
            if ins.name in names:
                w = attention_work(ins, comp, masks)
                if w is not None:
                    out[ins.name] = w
    return out


def attention_work(ins: Instruction, comp: Computation, masks: MaskTable) -> dict | None:
    """One custom call's attention work (attention_kernel_work's record), or None when its operands are
    not an attention kernel's."""
    if ins.opcode != "custom-call":
        return None
    shapes = operand_shapes(ins, comp)
    arrays = [s for s in shapes if not s.is_tuple and s.dtype in _FLOAT and len(s.dims) >= 3]
    if len(arrays) < 3:
        return None
    q = arrays[0]
    paged = _paged(q, arrays, shapes)
    if paged is not None:
        return paged
    qkv = [a for a in arrays if len(a.dims) == len(q.dims) and a.dims[-1] == q.dims[-1]]
    if len(qkv) < 3:
        return None
    k = qkv[1]
    big_in = sum(1 for a in qkv if a.dtype == q.dtype)
    outs = [s for s in ins.shape.leaves() if s.dtype == q.dtype and tuple(s.dims[-1:]) == tuple(q.dims[-1:])
            and len(s.dims) == len(q.dims)]
    half = "forward" if big_in == 3 else ("dq" if len(outs) == 1 else "dkv")
    heads = 1
    for d in q.dims[:-2]:
        heads *= d
    sq, skv, dim = q.dims[-2], k.dims[-2], q.dims[-1]
    dense = float(_PER_PAIR[half]) * heads * sq * skv * dim
    blocks = _block_sizes(ins)
    suffix = {"forward": "", "dq": "_dq", "dkv": "_dkv"}[half]
    bq, bkv = blocks.get(f"block_q{suffix}"), blocks.get(f"block_kv{suffix}")
    frac: float | None = 1.0
    how = "no block mask in the program: every (q, k) pair computed"
    if bq and bkv and sq % bq == 0 and skv % bkv == 0:
        seen = masks.get().get((sq // bq, skv // bkv), [])
        got = sorted(set(round(x, 6) for x in seen if x == x))
        if any(x != x for x in seen):
            frac, how = None, ("a block mask whose values the program does not carry (a capture's HLO holds "
                               "no constant's literal): the share of pairs computed is unknown")
        elif len(got) == 1:
            frac = got[0]
            how = (f"block mask [{sq // bq}x{skv // bkv}] at blocks {bq}x{bkv}: {frac:.1%} of the block pairs "
                   "computed")
        elif got:
            frac = max(got)
            how = f"{len(got)} block masks of that shape: the largest share counted ({frac:.1%})"
    return dict(
        half=half, heads=heads, seq_q=sq, seq_kv=skv, head_dim=dim, block_q=bq, block_kv=bkv,
        dense_flops=dense, computed_fraction=frac,
        how=f"{half} attention kernel: {_PER_PAIR[half]} x heads {heads} x Sq {sq} x Skv {skv} x D {dim} = "
            f"{dense:.4g} FLOPs for every pair; {how}")


def _paged(q, arrays, shapes) -> dict | None:
    """The work of a paged decode kernel (module docstring), or None when the operands are not one's."""
    if len(q.dims) < 3 or q.dims[-2] != 1 or len(arrays) < 3:
        return None
    k, v = arrays[1], arrays[2]
    if k.dims != v.dims or len(k.dims) != 4 or k.dims[-1] != q.dims[-1]:
        return None
    batch, pages, page = q.dims[0], k.dims[1], k.dims[2]
    tables = [s.elements for s in shapes if not s.is_tuple and s.dtype in ("s32", "u32", "s64")
              and s.elements >= batch and s.elements % batch == 0 and s.elements // batch <= pages]
    if not tables:
        return None
    per_seq = max(tables) // batch
    heads = 1
    for d in q.dims[:-2]:
        heads *= d
    skv, dim = per_seq * page, q.dims[-1]
    dense = float(_PER_PAIR["forward"]) * heads * skv * dim
    return dict(half="forward", heads=heads, seq_q=1, seq_kv=skv, head_dim=dim, block_q=None, block_kv=None,
                dense_flops=dense, computed_fraction=1.0,
                how=(f"paged decode kernel: {_PER_PAIR['forward']} x heads {heads} x Sq 1 x Skv {skv} "
                     f"({per_seq} pages of {page} from the page table) x D {dim} = {dense:.4g} FLOPs, an upper "
                     "bound: every page the table holds (the lengths that stop it early are runtime values)"))


def attention_kernel_flops(module: Module, names: set[str]) -> dict[str, tuple[float, str]]:
    """Instruction name -> (FLOPs per run, how) for the named attention kernels whose FLOPs the program
    tells (the mask's values known, or no mask)."""
    return {n: (w["dense_flops"] * w["computed_fraction"], w["how"])
            for n, w in attention_kernel_work(module, names).items() if w["computed_fraction"] is not None}


_MATMUL_IN = ("bf16", "f16", "f32", "s8", "u8")


def matmul_flops(operands: list[tuple[str, tuple[int, ...]]], outputs: list[tuple[int, ...]]) -> float | None:
    """2*M*N*K of a matmul kernel from its operands' (element type, dims) and its outputs' dims.

    The activation is the largest float (bf16/f16/f32/fp8/int8) operand, the
    weight the largest other matrix operand (any element type, incl. 4-bit);
    with a 2-D weight [N, K] or [K, N] and the output [.., M, N]:
    activation elements x weight elements / output elements = K^2. Returns
    None unless K is a whole number that is one of the weight's dimensions
    and divides the activation (so scale tensors and odd layouts give None).
    """
    out = [o for o in outputs if o and math.prod(o) > 1]
    if len(out) != 1:
        return None
    mats = [(t, d) for t, d in operands if sum(x > 1 for x in d) >= 2]
    if len(mats) < 2:
        return None
    mats.sort(key=lambda a: -math.prod(a[1]))
    x_elems = w = None
    o_elems = math.prod(out[0])
    for i, (t, d) in enumerate(mats):
        if t in _MATMUL_IN or t.startswith("f8e"):
            x_elems = math.prod(d)
            rest = mats[:i] + mats[i + 1:]
            w = next((d2 for _, d2 in rest if len([x for x in d2 if x > 1]) == 2), None)
            break
    if x_elems is None or w is None or o_elems <= 0:
        return None
    w_dims = [x for x in w if x > 1]
    k2 = x_elems * math.prod(w_dims) / o_elems
    k = round(math.sqrt(k2))
    if k <= 0 or k * k != k2 or k not in w_dims or x_elems % k:
        return None
    return 2.0 * o_elems * k


def is_concatenation(ins: Instruction, comp: Computation) -> bool:
    """A custom call whose output is its array operands put together (the pieces of async slices joined):
    it moves data and computes nothing."""
    if ins.opcode != "custom-call":
        return False
    shapes = operand_shapes(ins, comp)
    return len(shapes) > 1 and not any(x.is_tuple for x in shapes) and sum(x.bytes for x in shapes) == sum(
        leaf.bytes for leaf in ins.shape.leaves())


def kernel_flops(ins: Instruction, comp: Computation, masks: MaskTable) -> tuple[float, str] | None:
    """(FLOPs of one run, how) of a custom-call kernel from its operand shapes: an attention kernel's
    (q/k/v, half, mask: `masks`, the module's), else a matmul's (2*M*N*K); None when neither tells."""
    if ins.opcode != "custom-call" or is_concatenation(ins, comp):
        return None
    w = attention_work(ins, comp, masks)
    if w is not None and w["computed_fraction"] is not None:
        return w["dense_flops"] * w["computed_fraction"], w["how"]
    arrays = [s for s in operand_shapes(ins, comp) if not s.is_tuple]
    f = matmul_flops([(s.dtype, tuple(s.dims)) for s in arrays], [tuple(x.dims) for x in ins.shape.leaves()])
    return (f, "matmul kernel: 2 x M x N x K from its operand and output shapes") if f else None


def kernel_bytes(ins: Instruction, comp: Computation) -> int:
    """The HBM bytes a custom-call kernel moves at the least: each array operand read once and each output
    written once (a kernel that re-reads its inputs per tile moves more: a lower bound, its roofline an upper one)."""
    return sum(s.bytes for s in operand_shapes(ins, comp) if not s.is_tuple) + sum(
        leaf.bytes for leaf in ins.shape.leaves())
