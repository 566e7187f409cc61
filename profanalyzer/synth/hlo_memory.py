"""A train program's buffer assignment for the synthesizer (issue #16).

For scenarios with ``hlo_memory`` the ``/host:metadata`` entry of the train
program carries a real ``xla.HloProto`` (module with instructions and shapes,
and field 3, the buffer assignment) instead of opaque bulk. The memory layout
is the plan's, per TensorCore:

* parameters (HBM): the scanned layer weights, bf16, stacked over layers and
  sharded over FSDP, and Adam's two f32 moments of each;
* output: the loss (f32[]);
* one temp allocation, heap-simulated: each forward layer saves its output
  activation (bf16 [B, S, D]); the logits (f32 [B, S, V]) come after the last
  layer and are freed by the loss gradient; each backward layer then holds
  its input gradient (bf16 [B, S, D]) and frees its saved activation and the
  gradient. The heap peaks at ``logits_dense`` (all saved activations and
  the logits live) and the temp allocation is that peak.

``memory_truth`` states the same numbers from the plan (sizes by formula,
peak by construction), never by decoding the bytes.
"""

from __future__ import annotations

from .builder import Plan
from .pbenc import f_bytes, f_varint

F32, BF16 = 11, 16
ALLOC, FREE = 0, 1
#: (weight, its dims from the plan): the scanned layer weights.
WEIGHTS = ("query", "key", "value", "out", "wi_0", "wi_1", "wo")


def _dims(plan: Plan) -> dict:
    s = plan.spec
    L, D, F = plan.layers, s.d_model, s.d_ff
    fs = max(1, s.fsdp)
    kv = s.n_kv_heads * s.head_dim
    q = s.n_heads * s.head_dim
    shard = lambda n: max(1, n // fs)  # noqa: E731 - FSDP shards the first model dimension
    return {
        "query": [L, shard(D), q], "key": [L, shard(D), kv], "value": [L, shard(D), kv], "out": [L, shard(q), D],
        "wi_0": [L, shard(D), F], "wi_1": [L, shard(D), F], "wo": [L, shard(F), D],
    }


def _nbytes(et: int, dims: list[int]) -> int:
    n = 4 if et == F32 else 2
    for d in dims:
        n *= d
    return n


def layout(plan: Plan) -> dict:
    """Instructions, buffers, allocations and heap events of the plan (one place)."""
    s = plan.spec
    L = plan.layers
    B, S, D, V = max(1, s.batch_per_core), s.seq_len // max(1, s.cp), s.d_model, s.vocab
    inst: list[tuple[str, int, list[int]]] = []  # (name, element type, dims); id = index + 1
    params: list[tuple[int, int]] = []  # (instruction id, parameter number)
    for w, dims in _dims(plan).items():
        for name, et in ((f"params.{w}", BF16), (f"opt_state.mu.{w}", F32), (f"opt_state.nu.{w}", F32)):
            inst.append((name, et, dims))
            params.append((len(inst), len(params)))
    act = [B, S, D]
    fwd = []
    for i in range(L):
        inst.append((f"fwd_layer.{i}", BF16, act))
        fwd.append(len(inst))
    inst.append(("logits_dense", F32, [B, S, V]))
    logits = len(inst)
    inst.append(("loss_grad", F32, [B, S, V]))
    loss_grad = len(inst)
    bwd = []
    for i in reversed(range(L)):
        inst.append((f"bwd_layer.{i}", BF16, act))
        bwd.append(len(inst))
    inst.append(("loss", F32, []))
    loss = len(inst)
    size = {i + 1: _nbytes(et, d) for i, (_, et, d) in enumerate(inst)}
    # heap events: (kind, buffer = instruction id, at instruction name)
    ev = [(ALLOC, f, inst[f - 1][0]) for f in fwd]
    ev += [(ALLOC, logits, "logits_dense"), (FREE, logits, "loss_grad")]
    for li, b in zip(reversed(fwd), bwd, strict=True):
        name = inst[b - 1][0]
        ev += [(ALLOC, b, name), (FREE, li, name), (FREE, b, name)]
    heap_peak = sum(size[f] for f in fwd) + size[logits]
    return {"inst": inst, "params": params, "size": size, "events": ev, "heap_peak": heap_peak,
            "temp": fwd + [logits] + bwd, "loss": loss, "loss_grad": loss_grad}


def hlo_proto(plan: Plan, module: str) -> bytes:
    """The serialized xla.HloProto: the module's instructions and the buffer assignment."""
    lay = layout(plan)
    ins = b"".join(
        f_bytes(2, f_bytes(1, n) + f_bytes(2, "fusion") + f_bytes(3, f_varint(2, et) + b"".join(f_varint(3, d) for d in dims))
                + f_varint(35, i + 1))
        for i, (n, et, dims) in enumerate(lay["inst"]))
    mod = f_bytes(1, module) + f_bytes(3, f_bytes(1, "main") + ins)
    size = lay["size"]
    bufs = b"".join(f_bytes(1, f_varint(1, i) + f_varint(2, size[i]) + f_bytes(3, f_varint(4, i))) for i in size)
    allocs = []
    for iid, num in lay["params"]:
        allocs.append(f_varint(1, len(allocs)) + f_varint(2, size[iid]) + f_varint(5, 1) + (f_varint(6, num) if num else b"")
                      + f_bytes(9, f_varint(1, iid) + f_varint(3, size[iid])))
    allocs.append(f_varint(1, len(allocs)) + f_varint(2, size[lay["loss"]]) + f_varint(7, 1)
                  + f_bytes(9, f_varint(1, lay["loss"]) + f_varint(3, size[lay["loss"]])))
    temp_index = len(allocs)
    allocs.append(f_varint(1, temp_index) + f_varint(2, lay["heap_peak"])
                  + b"".join(f_bytes(9, f_varint(1, t) + f_varint(3, size[t])) for t in lay["temp"]))
    events = b"".join(f_bytes(1, (f_varint(1, k) if k else b"") + f_varint(2, b) + f_bytes(3, "main") + f_bytes(4, at))
                      for k, b, at in lay["events"])
    trace = f_bytes(4, events + f_varint(3, temp_index))
    return f_bytes(1, mod) + f_bytes(3, bufs + b"".join(f_bytes(3, a) for a in allocs) + trace)


def memory_truth(plan: Plan, top: int = 10) -> dict:
    """The memory ground truth of the plan: program HBM, peak instruction and
    the buffers live at the peak (temp: saved activations and the logits;
    whole run: parameters and the output), largest first."""
    lay = layout(plan)
    size, inst = lay["size"], lay["inst"]

    def shape(i: int) -> str:
        _, et, dims = inst[i - 1]
        return f"{'f32' if et == F32 else 'bf16'}[{','.join(str(d) for d in dims)}]"

    live = [(inst[i - 1][0], size[i], "temp", shape(i)) for i in lay["temp"][: plan.layers + 1]]
    live += [(inst[i - 1][0], size[i], "parameter", shape(i)) for i, _ in lay["params"]]
    live += [("loss", size[lay["loss"]], "output", "f32[]")]
    live.sort(key=lambda r: (-r[1], r[0]))
    hbm = sum(size[i] for i, _ in lay["params"]) + size[lay["loss"]] + lay["heap_peak"]
    return {
        "program_hbm_bytes": hbm,
        "heap_peak_bytes": lay["heap_peak"],
        "peak_instruction": "logits_dense",
        "host_offload_bytes": 0,
        "top_buffers": [list(r) for r in live[:top]],
    }
