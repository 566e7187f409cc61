"""End-to-end benchmark on trace shapes other than the host-bulk file of
`e2e_bench.py` (issue #15: fast on every trace shape).

    python benchmarks/shapes_bench.py [--keep DIR] [--base-events 1600000] [--scales 0.25,0.5,1,2]
                                      [--shapes host_bulk,many_ops,many_families,few_ops]
                                      [--tasks touch_floor,profanalyze,xprof_overlap] [--repeat 3]

Shapes (one host file each, built once and reused from --keep):

  host_bulk  `e2e_bench.py`'s file: 1.5M device events plus host-thread
             events and `/host:metadata` HLO-proto bulk (80% of its bytes)
             that profanalyzer skips and the touch floor has to parse.

The others have device planes only (no host planes):

  many_ops   `dense_short_fsdp` with its layer loop *unrolled*: every
             occurrence of a looped instruction within a step is its own
             instruction (own metadata, instruction numbers renumbered
             consistently in the name and the HLO text, operands included),
             as in a capture of an unrolled model; and the steps rotate
             through --variants recompiled programs (other instruction
             numbers), as in a capture of several programs. 128 layers, 5
             variants: ~1.6M device events, ~37k distinct op names.
  few_ops    `dense_short_fsdp` with 2 layers and as many steps as it takes
             to reach the same number of events: a few hundred distinct ops,
             many events each.
  many_families  many_ops whose unrolled layers also carry their own scope
             (`.../layers/...` in a clone's tf_op becomes `.../layers_<k>/...`,
             as in a model unrolled without a scan): the clones of one op no
             longer differ in their instruction numbers alone, so the
             distinct op *families* (op identity with the instruction numbers
             erased) number several thousand (~7k at 128 layers), not a few
             hundred; the variants still differ by numbers only. Classification
             also reads the name stack only as its rules see it
             (`classify.stack.rules_view`), which folds the layer scopes
             away: the tables print both counts.

Scaling (--scales): `events` scales the number of steps of the many-ops
shape (distinct ops fixed); `ops` scales the number of unrolled layers at a
fixed event count (layers x steps constant, so distinct ops grow and events
stay put). Each task runs in a fresh interpreter (`_harness.py`): wall
seconds inside the task and peak RSS (VmHWM), best of --repeat (XProf's
`xprof_overlap`, ~25 s a run, is run --xprof-repeat times). Tasks as in
`e2e_bench.py`, plus `before` (profanalyze from the source tree given by
--before). Every row of one invocation comes from the same run; each shape
gets its own table, with profanalyze's ratios to the touch floor and to
XProf.

The generator is benchmark-only: it does not change the synthesizer's
scenarios or their bytes.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import best_of, warm_up  # noqa: E402
from e2e_bench import TASKS  # noqa: E402
from e2e_bench import build as build_host_bulk  # noqa: E402

#: `profanalyze` with the package of an earlier source tree (--before): the
#: tree goes first on sys.path.
BEFORE = (
    "import sys\n"
    "sys.path.insert(0, sys.argv[3])\n"
    "from profanalyzer.cli import main\n"
    "rc = main([PATH, '-o', OUT, '-q'])\n"
    "note = rc\n"
)

_INSTR = re.compile(r"(?<![\w.\-])(%?[A-Za-z_][\w\-]*)\.(\d+)")
_NUMBER = re.compile(r"\.[0-9]+")  # an instruction number, as classification erases it
_RENUMBER = 1_000_000  # clone k of instruction `x.N` is `x.(N + k * _RENUMBER)`


def _renumber(text: str, k: int) -> str:
    if not k or not text:
        return text
    return _INSTR.sub(lambda m: f"{m.group(1)}.{int(m.group(2)) + k * _RENUMBER}", text)


def _scoped(tf_op: str | None, layer: int) -> str | None:
    """`tf_op` with its layer scope (`/layers/`) numbered (`/layers_<layer>/`)."""
    if not tf_op or not layer or "/layers/" not in tf_op:
        return tf_op
    return tf_op.replace("/layers/", f"/layers_{layer}/", 1)


def unroll(tl, variants: int = 1, scoped: bool = False) -> int:
    """Give each occurrence of an op template within a step its own template
    (clone k of a template that runs n times a step, k < n), and with
    `variants` > 1 a step-dependent one too (step s runs recompiled variant
    s % variants: other instruction numbers). With `scoped`, clone k's
    layer scope is numbered too (`_scoped`: its own op family). Mutates the
    timeline's plan and `occ_tid`; returns the number of templates."""
    plan = tl.plan
    ops = list(plan.ops)
    tid, step = tl.occ_tid, tl.occ_step
    # k-th occurrence of (step, tid), in row order
    order = np.lexsort((np.arange(len(tid)), tid, step))
    key = step[order].astype(np.int64) * (len(ops) + 1) + tid[order]
    first = np.r_[True, key[1:] != key[:-1]]
    start_of_run = np.maximum.accumulate(np.where(first, np.arange(len(key)), 0))
    k_sorted = np.arange(len(key)) - start_of_run
    k = np.empty_like(k_sorted)
    k[order] = k_sorted
    width = int(k.max()) + 1 if len(k) else 1  # clone k of variant v is v * width + k
    if variants > 1:
        k = (step.astype(np.int64) % variants) * width + k
    clones: dict[tuple[int, int], int] = {}
    pairs = sorted(set(zip(tid[k > 0].tolist(), k[k > 0].tolist(), strict=True)))
    for t, kk in pairs:
        clones[(t, kk)] = len(ops)
        o = ops[t]
        ops.append(replace(o, idx=len(ops), name=_renumber(o.name, kk), hlo=_renumber(o.hlo, kk),
                           sc_name=_renumber(o.sc_name, kk), tf_op=_scoped(o.tf_op, kk % width) if scoped else o.tf_op))
    for (t, kk), new in clones.items():  # start <-> done peers follow their clone
        p = ops[t].peer
        if p >= 0:
            ops[new].peer = clones.get((p, kk), p)
    new_tid = tid.copy()
    sel = np.nonzero(k > 0)[0]
    new_tid[sel] = [clones[(t, kk)] for t, kk in zip(tid[sel].tolist(), k[sel].tolist(), strict=True)]
    plan.ops[:] = ops
    tl.occ_tid = new_tid
    return len(ops)


def build(path: Path, layers: int, steps: int, unrolled: bool, variants: int = 1, scoped: bool = False) -> dict:
    from profanalyzer.synth import get_scenario, real_shapes
    from profanalyzer.synth.model import simulate
    from profanalyzer.synth.program import build_plan
    from profanalyzer.synth.writer import hostnames_for, write_host

    spec = get_scenario("dense_short_fsdp")
    plan = build_plan(spec, seed=0, layers=layers, programs_of=real_shapes.PROGRAM_BUILDERS,
                      host_offload=real_shapes.splice_host_offload)
    tl = simulate(plan, seed=0, hosts=1, steps=steps)
    templates = unroll(tl, variants, scoped) if unrolled else len(plan.ops)
    counts: dict = {}
    data = write_host(tl, 0, hostnames_for(spec.name, 0, 1)[0], 0, counts)
    path.write_bytes(data)
    info = {"mb": len(data) / 1e6, "events": counts["device_events"], "xla_ops": counts["xla_ops_events"],
            "templates": templates, "layers": layers, "steps": steps}
    print(f"built {path.name}: {info['mb']:.0f} MB, {info['events']:,} device events, "
          f"{templates:,} op templates ({layers} layers x {steps} steps)", flush=True)
    return info


def _events_per_step(layers: int) -> float:
    from profanalyzer.synth import synthesize

    _, probe = synthesize("dense_short_fsdp", steps=3, layers=layers)
    _, probe2 = synthesize("dense_short_fsdp", steps=2, layers=layers)
    return probe["counts"]["device_events"] - probe2["counts"]["device_events"]


def variants(shapes: list[str], base_events: int, scales: list[float], layers: int) -> list[tuple[str, str, int, int, bool]]:
    """(label, file stem, layers, steps, unrolled); a stem starting `many_families` is also scoped."""
    per_layer_step = _events_per_step(layers) / layers
    out = []
    if "host_bulk" in shapes:
        out.append(("host_bulk 1x", "host_bulk", 48, 0, False))
    base_steps = max(2, round(base_events / (per_layer_step * layers)))
    if "many_ops" in shapes:
        out.append(("many_ops 1x", f"many_ops-L{layers}-S{base_steps}", layers, base_steps, True))
    if "many_families" in shapes:
        out.append(("many_families 1x", f"many_families-L{layers}-S{base_steps}", layers, base_steps, True))
    if "few_ops" in shapes:
        per_step2 = _events_per_step(2)
        s = max(2, round(base_events / per_step2))
        out.append(("few_ops 1x", f"few_ops-L2-S{s}", 2, s, False))
    for f in scales:
        if f == 1:
            continue
        s = max(2, round(base_steps * f))
        out.append((f"events {f:g}x (many_ops, steps x{f:g})", f"many_ops-L{layers}-S{s}", layers, s, True))
    for f in scales:
        if f == 1:
            continue
        lf = max(2, round(layers * f))
        s = max(2, round(base_steps * layers / lf))
        out.append((f"distinct ops {f:g}x (layers x{f:g}, steps /{f:g})", f"many_ops-L{lf}-S{s}", lf, s, True))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", type=Path, default=None, help="folder to keep the built traces in (reused when present)")
    ap.add_argument("--base-events", type=int, default=1_600_000)
    ap.add_argument("--layers", type=int, default=128, help="unrolled layers of the 1x many-ops shape")
    ap.add_argument("--variants", type=int, default=5,
                    help="recompiled program variants the many-ops steps rotate through (distinct ops x this)")
    ap.add_argument("--scales", default="0.25,0.5,1,2")
    ap.add_argument("--shapes", default="host_bulk,many_ops,many_families,few_ops")
    ap.add_argument("--tasks", default="touch_floor,profanalyze,xprof_overlap")
    ap.add_argument("--xprof-repeat", type=int, default=1)
    ap.add_argument("--scaling-tasks", default="profanalyze", help="tasks for the scaling rows")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--before", type=Path, default=None,
                    help="source tree of an earlier version (e.g. a `git worktree` with its C decoder built): adds "
                         "the task `before` (profanalyze with that package) to every row")
    args = ap.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="profanalyzer-shapes-"))
    folder.mkdir(parents=True, exist_ok=True)
    scales = [float(x) for x in args.scales.split(",") if x]
    todo = variants(args.shapes.split(","), args.base_events, scales, args.layers)
    infos = {}
    for label, stem, layers, steps, unrolled in todo:
        path = folder / (f"{stem}-V{args.variants}.xplane.pb" if unrolled else f"{stem}.xplane.pb")
        if not path.exists():
            t0 = time.perf_counter()
            if stem == "host_bulk":
                build_host_bulk(path, 1_500_000, 260, layers)
            else:
                build(path, layers, steps, unrolled, args.variants if unrolled else 1, stem.startswith("many_families"))
            print(f"(build took {time.perf_counter() - t0:.0f} s)", flush=True)
        infos[label] = path
    warm_up()
    out = folder / "shapes.report.html"
    print(f"\npython {sys.version.split()[0]}; {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f} at start")
    scaling_header = False
    for label, *_ in todo:
        path = infos[label]
        one_x = label.endswith(" 1x")
        tasks = [t for t in (args.tasks if one_x else args.scaling_tasks).split(",") if t]
        res = {t: best_of(TASKS[t], args.xprof_repeat if t == "xprof_overlap" else args.repeat, str(path), str(out))
               for t in tasks}
        if args.before:
            res["before"] = best_of(BEFORE, args.repeat, str(path), str(out), str(args.before))
        n_meta, n_fam, n_classified, n_events = _distinct_ops(path)
        mb = path.stat().st_size / 1e6
        if one_x:
            print(f"\n### {label[:-3]}: {mb:.0f} MB, {n_events:,} device events, {n_meta:,} distinct op metadata, "
                  f"{n_fam:,} op families ({n_classified:,} as classification groups them)\n")
            print("| task | seconds | peak RSS MiB | x touch floor |")
            print("|---|---:|---:|---:|")
            floor = res.get("touch_floor", {}).get("seconds")
            for t, r in res.items():
                if "error" in r:
                    print(f"| {t} | error: {r['error']} | | |")
                    continue
                ratio = f"{r['seconds'] / floor:.2f}" if floor else "-"
                print(f"| {t} | {r['seconds']:.2f} | {r['maxrss_kib'] / 1024:.0f} | {ratio} |")
            x, p = res.get("xprof_overlap", {}), res.get("profanalyze", {})
            if "seconds" in x and "seconds" in p:
                print(f"\nprofanalyze vs XProf: {x['seconds'] / p['seconds']:.1f}x faster, peak RSS "
                      f"{p['maxrss_kib'] / x['maxrss_kib']:.2f} of XProf's", flush=True)
            continue
        if not scaling_header:
            print("\n### scaling (many_ops)\n")
            print("| scaling | MB | device events | distinct op metadata | task | seconds | peak RSS MiB |")
            print("|---|---:|---:|---:|---|---:|---:|")
            scaling_header = True
        for t, r in res.items():
            if "error" in r:
                print(f"| {label} | | | | {t} | error: {r['error']} | |")
                continue
            print(f"| {label} | {mb:.0f} | {n_events:,} | {n_meta:,} | {t} | {r['seconds']:.2f} | "
                  f"{r['maxrss_kib'] / 1024:.0f} |", flush=True)


def _classified_families(rows: list[tuple[str, ...]]) -> int:
    """The op families this checkout's classification makes of these op identities (HLO text, display
    name, hlo_category, tf_op, shape_with_layout): numbers erased, the name stack as the rules see it."""
    from profanalyzer.classify import Memo, classify_codes

    memo = Memo()
    cols = ("hlo_text", "display_name", "category", "tf_op", "shape_with_layout")
    classify_codes({c: [r[j] for r in rows] for j, c in enumerate(cols)}, n=len(rows), memo=memo)
    return len(memo.families)


def _distinct_ops(path: Path) -> tuple[int, int, int, int]:
    """(distinct XLA Ops metadata used on TensorCore planes, their op families, the families
    classification makes of them, device events). A family here is the (HLO text, display name, hlo_category, tf_op, shape_with_layout) of an op with every
    instruction number (`.<digits>`) of the text and the display name erased (`_classified_families`:
    what classification groups by, the name stack folded too)."""
    from profanalyzer.read.xspace import xplane_pb2 as pb

    sp = pb.XSpace.FromString(path.read_bytes())  # type: ignore[attr-defined]  # generated protobuf classes
    used: set[str] = set()
    families: set[tuple[str, ...]] = set()
    ops: dict[tuple[str, ...], None] = {}
    n = 0
    for p in sp.planes:
        if not p.name.startswith("/device:"):
            continue
        stat_names = {k: v.name for k, v in p.stat_metadata.items()}
        for ln in p.lines:
            n += len(ln.events)
            if ln.name != "XLA Ops":
                continue
            for i in {e.metadata_id for e in ln.events}:
                md = p.event_metadata[i]
                used.add(md.name)
                stats = {stat_names.get(s.metadata_id, ""): s.str_value or stat_names.get(s.ref_value, "")
                         for s in md.stats}
                fields = tuple(stats.get(k, "") for k in ("hlo_category", "tf_op", "shape_with_layout"))
                families.add((_NUMBER.sub(".0", md.name), _NUMBER.sub(".0", md.display_name), *fields))
                ops[(md.name, md.display_name, *fields)] = None
    return len(used), len(families), _classified_families(list(ops)), n


if __name__ == "__main__":
    main()
