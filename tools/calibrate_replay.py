#!/usr/bin/env python3
"""Fit the before-the-run cost model on the real-TPU corpus: how the compiler's
`estimated_cycles` turn into time on the chip that ran the programs.

For every program of sample_traces/real-tpu/ whose capture is complete, the
dump is replayed uncalibrated and each op priced by the compiler's cycles is
matched by name with its measured self time in the capture of the same
module. The ops are split by what bounds them (their HLO FLOPs at the BF16
peak against their HBM bytes at the HBM bandwidth). Per class, a program's
factor is (cycles / clock) / measured; the fit is the median over the
programs. Printed: the factors, and per program the predicted step before and
after calibration against the host's wall clock.

    python3 tools/calibrate_replay.py [--chip v5e]

The factors are written into profanalyzer/core/hardware.py by hand (`ReplayCalibration`),
with this command's output as their provenance.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tarfile
import tempfile
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from profanalyzer.core.hardware import chip_by_key  # noqa: E402
from profanalyzer.model.trace import LINE_OPS  # noqa: E402
from profanalyzer.pipeline.run import run  # noqa: E402
from profanalyzer.read.hlo.load import read_program  # noqa: E402
from profanalyzer.read.hlo.replay import op_bound, replay  # noqa: E402

CORPUS = ROOT / "sample_traces" / "real-tpu"


def _measured(logdir: Path) -> tuple[dict[str, float], int]:
    att = run(logdir).attributed
    assert att is not None  # a capture, not a saved document
    out: dict[str, float] = defaultdict(float)
    steps = 0
    for w in att.work:
        ev = w.plane.line(LINE_OPS).events
        short = w.plane.meta.short_names
        for k, d in zip(ev.meta.tolist(), ev.self_ps.tolist(), strict=True):
            out[short[k]] += d
        steps = len(att.trace.steps[w.plane.label].number)
    return out, max(1, steps)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chip", default="v5e")
    ns = ap.parse_args(argv)
    chip = replace(chip_by_key(ns.chip), replay_calibration=None)
    manifest = json.loads((CORPUS / "manifest.json").read_text())
    ratios: dict[str, list[float]] = defaultdict(list)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for p in manifest["programs"]:
            if not p.get("capture_complete", True):
                continue
            with tarfile.open(CORPUS / p["archive"]) as tar:
                tar.extractall(tmp, filter="data")
            folder = Path(tmp) / p["workload"]
            rep = replay(read_program(folder / "dump"), chip)
            meas, steps = _measured(folder / "logdir")
            pred: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
            for o in rep.ops:
                if o.sparsecore or o.how != "estimated_cycles" or o.instruction.name not in meas:
                    continue
                pred[op_bound(o, chip)][o.instruction.name] += o.dur_ps
            for cls, ops in pred.items():
                m = sum(meas[n] / steps for n in ops)
                if m > 0:
                    ratios[cls].append(sum(ops.values()) / m)
            cal = replay(read_program(folder / "dump"), chip_by_key(ns.chip)).step_ps / 1e9
            rows.append((p["workload"], p["measured_step_ms"], rep.step_ps / 1e9, cal))
    fit = {cls: statistics.median(v) for cls, v in sorted(ratios.items())}
    print(f"chip {chip.key}: {len(rows)} programs; (cycles / {chip.clock_ghz:g} GHz) / measured, median per class:")
    for cls, f in fit.items():
        v = sorted(ratios[cls])
        print(f"  {cls:8s} {f:.3f}  (programs: {len(v)}, range {v[0]:.2f}-{v[-1]:.2f})")
    print("program, measured ms, predicted uncalibrated ms, predicted with the chip's calibration ms")
    for w, m, pr, cal in rows:
        print(f"  {w:24s} {m:8.2f} {pr:8.2f} {pr / m:5.2f}x {cal:8.2f} {cal / m:5.2f}x")
    errs = sorted(abs(cal / m - 1) for _w, m, _pr, cal in rows)
    print(f"calibrated: median |pred/meas - 1| {statistics.median(errs):.1%}, within 50%: "
          f"{sum(e <= 0.5 for e in errs)}/{len(errs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
