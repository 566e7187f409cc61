"""Markdown tables of the real-compiler corpus (sample_traces/compiled/):
per program the predicted buckets (ms and % of the predicted step) and the
buffer assignment's HBM beside the compiler's own memory_analysis() and
cost_analysis(); and the expected-vs-measured table of a capture that
carries HLO.

    python tools/corpus_table.py [CAPTURE ...] > tables.md

Every time in the first table is PREDICTED (the replay of the compiler's
estimates); the second compares the compiler's estimates with a capture.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from profanalyzer.core.hardware import chip_from_device_type  # noqa: E402
from profanalyzer.core.vocab import BUCKETS  # noqa: E402
from profanalyzer.pipeline.run import RunOptions, run_analysis  # noqa: E402
from profanalyzer.read.hlo.load import read_program  # noqa: E402
from profanalyzer.read.hlo.memory import (  # noqa: E402
    assignment_stats,
    compiler_stats,
    final_stats,
    proto_allocations,
)
from profanalyzer.read.hlo.replay import replay  # noqa: E402

CORPUS = ROOT / "sample_traces" / "compiled"
MIB = 2**20


def corpus_tables() -> list[str]:
    man = json.loads((CORPUS / "manifest.json").read_text())
    shown = ("matmul_bf16", "matmul_fp8", "attention", "all_gather", "reduce_scatter", "all_reduce", "all_to_all",
             "other_collective", "host_offload", "other_compute")
    assert set(shown) <= set(BUCKETS)
    head = "| program | chip | predicted step ms | " + " | ".join(shown) + " |"
    out = ["### Predicted buckets per corpus program (ms, % of the predicted step)", "",
           "PREDICTED: the after_codegen module replayed (estimated_cycles at the assumed clock; ops without an "
           "estimate as bytes over HBM / ICI).", "", head, "| --- | --- | ---: |" + " ---: |" * len(shown)]
    mem = ["", "### Memory and cost: the buffer assignment beside the compiler", "",
           "temp (heap): the assignment's preallocated-temp heap; temp (final): the final executable's, the heap padded "
           "to 16 KiB plus its fragmentation against its peak buffers (profanalyzer.read.hlo.memory.final_stats); peak = "
           "argument + output - alias + temp; fit: the final peak over the HBM per TensorCore.", "",
           "| program | argument MiB | output MiB | alias MiB | temp MiB (heap) | temp MiB (final) | temp MiB (memory_analysis) "
           "| peak MiB (final) | peak MiB (compiler) | peak gap (final) | fit (final peak / HBM per TensorCore) "
           "| flops (cost_analysis) | bytes accessed | estimated ms (sum of estimated_cycles) |",
           "| --- |" + " ---: |" * 13]
    for p in man["programs"]:
        chip = chip_from_device_type(p["device_kind"])
        assert chip is not None
        a = run_analysis(CORPUS / p["files"]["hlo_proto_after_codegen"], RunOptions(chip=chip.key))
        step = a.steps.step_time_ps["median"]
        cells = []
        for b in shown:
            s = a.breakdown.get(b)
            cells.append(f"{s.ps / 1e9:.3f} ({s.fraction:.1%})" if s is not None and s.ps > 0 else "-")
        out.append(f"| `{p['name']}` | {chip.key} | {step / 1e9:.3f} | " + " | ".join(cells) + " |")
        proto = gzip.decompress((CORPUS / p["files"]["hlo_proto"]).read_bytes())
        heap = assignment_stats(proto_allocations(proto))
        ours = final_stats(proto)
        assert ours is not None
        comp_doc = json.loads((CORPUS / p["files"]["compiler"]).read_text())
        comp = compiler_stats(json.dumps(comp_doc))
        assert comp is not None
        cap = chip.hbm_gib * 2**30 / max(1, chip.planes_per_chip)
        est = replay(read_program(CORPUS / p["files"]["hlo_proto_after_codegen"]), chip).estimated_ps
        cost = comp_doc["cost_analysis"]
        mem.append(f"| `{p['name']}` | {ours.argument / MIB:.1f} | {ours.output / MIB:.1f} | {ours.alias / MIB:.1f} | "
                   f"{heap.temp / MIB:.1f} | {ours.temp / MIB:.1f} | {comp.temp / MIB:.1f} | {ours.peak / MIB:.1f} | "
                   f"{comp.peak / MIB:.1f} | {(ours.peak - comp.peak) / comp.peak:+.2%} | {ours.peak / cap:.2%} | "
                   f"{cost['flops'] / 1e9:.2f} G | "
                   f"{cost['bytes accessed'] / 1e6:.1f} MB | {est / 1e9:.3f} |")
    return out + mem


def expected_table(path: Path) -> list[str]:
    a = run_analysis(path)
    e = a.expected
    out = ["", f"### Expected vs measured: `{path.name}` ({a.hardware.name})", ""]
    if e is None:
        return out + ["No HLO in this capture (no HloProto in /host:metadata): nothing to set the measurement "
                      "against.", ""]
    out += [f"Per step ({e.steps} steps): expected {e.step_expected_ps / 1e9:.3f} ms for the ops the compiler "
            f"estimated, measured {e.step_measured_estimated_ps / 1e9:.3f} ms; ops without an estimate measured "
            f"{e.step_measured_unestimated_ps / 1e9:.3f} ms (clock {e.clock_ghz:g} GHz assumed).", "",
            "| op | family | runs | expected ms | measured mean ms | min-max ms | measured / expected |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for o in e.ops + e.without_estimate:
        exp = f"{o.expected_ps / 1e9:.3f}" if o.expected_ps is not None else "no estimate"
        ratio = f"{o.ratio:.2f}x" if o.ratio is not None else "-"
        out.append(f"| {o.name} | {o.family} | {o.occurrences} | {exp} | {o.measured_mean_ps / 1e9:.3f} | "
                   f"{o.measured_min_ps / 1e9:.3f}-{o.measured_max_ps / 1e9:.3f} | {ratio} |")
    for s in e.slower:
        out.append(f"\nSlower than expected: {s.name}: {s.evidence}")
    return out + [""]


def main(argv: list[str]) -> int:
    lines = corpus_tables()
    for arg in argv:
        lines += expected_table(Path(arg))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
