"""HLO text helpers: shapes with TPU layouts, instruction naming, JAX name stacks.

Everything here is deterministic given the :class:`Namer`'s seed.
"""

from __future__ import annotations

import random

#: Bytes per element of the HLO element types we emit.
DTYPE_BYTES = {
    "bf16": 2,
    "f32": 4,
    "s32": 4,
    "u32": 4,
    "s8": 1,
    "f8e4m3fn": 1,
    "f8e5m2": 1,
    "pred": 1,
}

_TILE = {
    "bf16": "T(8,128)(2,1)",
    "f32": "T(8,128)",
    "s32": "T(8,128)",
    "u32": "T(8,128)",
    "s8": "T(8,128)(4,1)",
    "f8e4m3fn": "T(8,128)(4,1)",
    "f8e5m2": "T(8,128)(4,1)",
    "pred": "T(8,128)(4,1)",
}
_TILE_1D = {"bf16": "T(1024)(128)(2,1)", "f32": "T(1024)", "s32": "T(1024)", "u32": "T(1024)"}


def shape(dtype: str, dims: tuple[int, ...] | list[int], *, mem: str = "", minor_first: bool = False) -> str:
    """``bf16[1,2048,2048]{2,1,0:T(8,128)(2,1)}`` style shape with layout."""
    dims = [int(d) for d in dims]
    n = len(dims)
    if n == 0:
        return f"{dtype}[]{{:T(128){mem}}}"
    order = list(range(n - 1, -1, -1))
    if minor_first and n == 3:
        order = [1, 2, 0]  # the {1,2,0} layouts seen in real traces
    elif minor_first and n == 4:
        order = [1, 3, 2, 0]
    tile = _TILE_1D.get(dtype, "T(1024)") if n == 1 else _TILE.get(dtype, "T(8,128)")
    return f"{dtype}[{','.join(map(str, dims))}]{{{','.join(map(str, order))}:{tile}{mem}}}"


def nbytes(dtype: str, dims) -> int:
    n = DTYPE_BYTES[dtype]
    for d in dims:
        n *= int(d)
    return n


class Namer:
    """Issues unique, plausible HLO instruction numbers per opcode prefix."""

    def __init__(self, seed: int):
        self._rng = random.Random(seed * 7919 + 17)
        self._next: dict[str, int] = {}
        self._used: set[str] = set()

    def num(self, prefix: str) -> int:
        n = self._next.get(prefix)
        if n is None:
            n = self._rng.randrange(3, 60) if prefix not in ("fusion",) else self._rng.randrange(100, 400)
        n += self._rng.randrange(1, 6)
        self._next[prefix] = n
        return n

    def name(self, prefix: str) -> str:
        while True:
            nm = f"{prefix}.{self.num(prefix)}"
            if nm not in self._used:
                self._used.add(nm)
                return nm

    def claim(self, nm: str) -> str:
        if nm in self._used:
            i = 1
            while f"{nm}.{i}" in self._used:
                i += 1
            nm = f"{nm}.{i}"
        self._used.add(nm)
        return nm

    def gte(self) -> str:
        return f"%get-tuple-element.{self.num('get-tuple-element')}"

    def param(self) -> str:
        return f"%param.{self.num('param')}"

    def randint(self, a: int, b: int) -> int:
        return self._rng.randint(a, b)


# ---------------------------------------------------------------------------
# JAX name stacks (tf_op) as MaxText produces them
# ---------------------------------------------------------------------------
ROOT = "jit(train_step)/jit(main)"
FWD = ROOT + "/jvp(Transformer)/decoder"
BWD = ROOT + "/transpose(jvp(Transformer))/decoder"

DG_FWD = "dot_general[dimension_numbers=(((2,), (0,)), ((), ())) precision=None preferred_element_type=bfloat16]"
DG_DGRAD = "dot_general[dimension_numbers=(((2,), (1,)), ((), ())) precision=None preferred_element_type=bfloat16]"
DG_WGRAD = "dot_general[dimension_numbers=(((0, 1), (0, 1)), ((), ())) precision=None preferred_element_type=bfloat16]"
DG_F32 = "dot_general[dimension_numbers=(((2,), (0,)), ((), ())) precision=None preferred_element_type=float32]"
DG_ATTN = "dot_general[dimension_numbers=(((3,), (3,)), ((0, 2), (0, 2))) precision=None preferred_element_type=float32]"


def layer_scope(phase: str, remat: bool = False, pipeline: bool = False) -> str:
    """Name stack prefix for an op inside the scanned layer loop."""
    pp = "/pipeline/while/body/vmap(stage)" if pipeline else ""
    if phase == "fwd":
        return f"{FWD}{pp}/while/body/layers"
    if remat:
        return f"{BWD}{pp}/while/body/checkpoint/rematted_computation/layers"
    return f"{BWD}{pp}/while/body/checkpoint/layers"


def splash_name(kind: str, block: int, fused_bwd: bool = False) -> tuple[str, str]:
    """(instruction name, name-stack component) of a splash attention kernel."""
    b = block
    if kind == "fwd":
        comp = (
            f"splash_mha_fwd_segmented_residuals_block_kv={b}_block_kv_compute={b}_block_kv_dkv={b}"
            f"_block_kv_dkv_compute={b}_block_kv_dq={b}_block_q={b}_block_q_dkv={b}_block_q_dq={b}"
            f"_k_layout=1_q_layout=1_use_fused_bwd_kernel={fused_bwd}_v_layout=1"
        )
    elif kind == "dq":
        comp = f"splash_mha_dq_segmented_block_kv_dq={b}_block_q_dq={b}_k_layout=1_q_layout=1_v_layout=1"
    else:
        comp = (
            f"splash_mha_dkv_segmented_block_kv_dkv={b}_block_kv_dkv_compute={b}_block_q_dkv={b}"
            f"_k_layout=1_q_layout=1_v_layout=1"
        )
    inst = comp.replace("=", "_")
    if kind != "fwd":
        inst = "vmap_" + inst + "_"
        comp = f"vmap({comp})"
    return inst, comp
