"""FLOPs of fused attention kernels from the program: q/k/v shapes and the mask.

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
"""

from __future__ import annotations

import re

from profanalyzer.hlo.model import Instruction, Module
from profanalyzer.model import AttentionKernel

__all__ = ["attention_kernel_flops", "attention_kernel_work", "attention_kernels", "attention_kernel_rows"]

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


def attention_kernel_work(module: Module, names: set[str]) -> dict[str, dict]:
    """Instruction name -> its work (half, heads, seq_q, seq_kv, head_dim, block_q, block_kv, dense_flops,
    computed_fraction (None: the mask's values are not in the program), how) for the named attention
    kernel custom calls."""
    from profanalyzer.hlo.schedule import operand_shapes

    masks: dict[tuple[int, int], list[float]] | None = None
    out: dict[str, dict] = {}
    for comp in module.computations:
        for ins in comp.instructions:
            if ins.name not in names or ins.opcode != "custom-call":
                continue
            arrays = [s for s in operand_shapes(ins, comp) if not s.is_tuple and s.dtype in _FLOAT and len(s.dims) >= 3]
            if len(arrays) < 3:
                continue
            q = arrays[0]
            qkv = [a for a in arrays if len(a.dims) == len(q.dims) and a.dims[-1] == q.dims[-1]]
            if len(qkv) < 3:
                continue
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
                if masks is None:
                    masks = _masks(module)
                seen = masks.get((sq // bq, skv // bkv), [])
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
            out[ins.name] = dict(
                half=half, heads=heads, seq_q=sq, seq_kv=skv, head_dim=dim, block_q=bq, block_kv=bkv,
                dense_flops=dense, computed_fraction=frac,
                how=f"{half} attention kernel: {_PER_PAIR[half]} x heads {heads} x Sq {sq} x Skv {skv} x D {dim} = "
                    f"{dense:.4g} FLOPs for every pair; {how}")
    return out


def attention_kernel_flops(module: Module, names: set[str]) -> dict[str, tuple[float, str]]:
    """Instruction name -> (FLOPs per run, how) for the named attention kernels whose FLOPs the program
    tells (the mask's values known, or no mask)."""
    return {n: (w["dense_flops"] * w["computed_fraction"], w["how"])
            for n, w in attention_kernel_work(module, names).items() if w["computed_fraction"] is not None}


def attention_kernels(kernel_ops, module: Module | None) -> tuple[AttentionKernel, ...] | None:
    """The fused attention kernels among the analysis' kernel ops, with their work from the program;
    None without a program or without such kernels."""
    ops = {op.name: op for op in kernel_ops if op.bucket == "attention"}
    if module is None or not ops:
        return None
    work = attention_kernel_work(module, set(ops))
    out = tuple(AttentionKernel(op=n, half=w["half"], heads=w["heads"], seq_q=w["seq_q"], seq_kv=w["seq_kv"],
                                head_dim=w["head_dim"], block_q=w["block_q"], block_kv=w["block_kv"],
                                dense_flops=w["dense_flops"], computed_fraction=w["computed_fraction"],
                                ps=float(ops[n].self_ps))
                for n, w in sorted(work.items()))
    return out or None


def attention_kernel_rows(work, module: Module | None) -> dict[str, dict[int, tuple]]:
    """plane label -> {metadata row: (bucket, kernel, precision, reason, attention part, FLOPs)} for the
    attention kernels whose FLOPs the classification could not tell (the re-bucketing step that
    `attribution.attribute_trace` applies: the bucket stays, the FLOPs come from the program)."""
    if module is None:
        return {}
    wanted: set[str] = set()
    for w in work:
        cols = w.classes.columns
        for i, short in enumerate(w.plane.meta.short_names):
            if cols["bucket"][i] == "attention" and cols["attention_part"][i] == "kernel" and not _known(
                    cols["shape_flops"][i]):
                wanted.add(short)
    found = attention_kernel_flops(module, wanted) if wanted else {}
    out: dict[str, dict[int, tuple]] = {}
    for w in work:
        cols = w.classes.columns
        rows = {}
        for i, short in enumerate(w.plane.meta.short_names):
            got = found.get(short)
            if got is not None and cols["bucket"][i] == "attention" and not _known(cols["shape_flops"][i]):
                rows[i] = ("attention", cols["kernel"][i], cols["precision"][i],
                           f"{cols['reason'][i]}; FLOPs from the program: {got[1]}", "kernel", got[0])
        if rows:
            out[w.plane.label] = rows
    return out


def _known(x) -> bool:
    return isinstance(x, (int, float)) and x == x and x > 0
