"""End-to-end benchmark on a large single-host TPU7x capture (issue: fast on
gigabyte traces).

    python benchmarks/e2e_bench.py [--keep DIR] [--events 1500000] [--bulk-mb 260] [--tasks ...]

Builds (once; reused from --keep) one host file with >= 1.5M device events plus
host-thread events and `/host:metadata` HLO-proto bulk so the file is >= 300 MB,
then runs each task in a fresh subprocess and reports wall seconds and peak RSS
(the child's own ru_maxrss), with ratios against the touch floor, all in the
same run:

  bare_parse     XSpace.FromString of the whole file (protobuf runtime, upb)
  touch_floor    bare_parse + reading each device event's metadata_id,
                 offset_ps and duration_ps once in Python
  xprof_overlap  XProf's own `analyze_async_overlap` on the same file (the
                 `[xprof]` extra; run on a copy in a temp dir, cache bypassed,
                 HOME/TMPDIR redirected so nothing is written elsewhere)
  profanalyze    `profanalyze FILE -o report.html -q` end to end (read,
                 analysis, rules, HTML), as a user runs it
  profanalyze_memory  the same with `--memory` (also decodes /host:metadata
                 and the host planes: what the default run never touches)

No timing is asserted anywhere; numbers go into benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import best_of, warm_up  # noqa: E402

TASKS = {
    "bare_parse": (
        "from profanalyzer.read.xspace import xplane_pb2 as pb\n"
        "sp = pb.XSpace.FromString(open(PATH, 'rb').read())\n"
        "note = len(sp.planes)\n"
    ),
    "touch_floor": (
        "from profanalyzer.read.xspace import xplane_pb2 as pb\n"
        "sp = pb.XSpace.FromString(open(PATH, 'rb').read())\n"
        "n = 0\n"
        "for p in sp.planes:\n"
        "    if p.name.startswith('/device:'):\n"
        "        for ln in p.lines:\n"
        "            for e in ln.events:\n"
        "                a = e.metadata_id; b = e.offset_ps; c = e.duration_ps; n += 1\n"
        "note = n\n"
    ),
    "xprof_overlap": (
        "import os, shutil, tempfile\n"
        "tmp = tempfile.mkdtemp(prefix='xprof-bench-')\n"
        "os.environ['HOME'] = tmp; os.environ['TMPDIR'] = tmp; os.environ['XDG_CACHE_HOME'] = tmp\n"
        "tempfile.tempdir = tmp\n"
        "run = os.path.join(tmp, 'run'); os.makedirs(run)\n"
        "dst = os.path.join(run, os.path.basename(PATH)); shutil.copyfile(PATH, dst)\n"
        "t0 = time.perf_counter()\n"
        "from xprof.cli.tools.analyze_async_overlap_tool import analyze_async_overlap\n"
        "res = json.loads(analyze_async_overlap(dst, bypass_cache=True))\n"
        "note = res.get('status'), res.get('summary', {}).get('count')\n"
        "shutil.rmtree(tmp, ignore_errors=True)\n"
    ),
    "profanalyze": (
        "from profanalyzer.cli import main\n"
        "rc = main([PATH, '-o', OUT, '-q'])\n"
        "note = rc\n"
    ),
    "profanalyze_memory": (
        "from profanalyzer.cli import main\n"
        "rc = main([PATH, '-o', OUT, '-q', '--memory'])\n"
        "note = rc\n"
    ),
}


def _field(num: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2)."""
    key = (num << 3) | 2
    out = bytearray()
    for v in (key, len(payload)):
        while True:
            b = v & 0x7F
            v >>= 7
            out.append(b | (0x80 if v else 0))
            if not v:
                break
    return bytes(out) + payload


def build(path: Path, events: int, bulk_mb: int, layers: int) -> None:
    """Synthesize the device planes, then append host bulk planes."""
    import math

    import numpy as np

    from profanalyzer.read.xspace import xplane_pb2 as pb
    from profanalyzer.synth import synthesize

    _, probe = synthesize("dense_short_fsdp", steps=2, layers=layers)
    steps = max(2, math.ceil(events / (probe["counts"]["device_events"] / 2)))
    files, truth = synthesize("dense_short_fsdp", steps=steps, layers=layers)
    data = files[0][1]
    rng = np.random.default_rng(0)
    extra = bytearray()
    # /host:metadata: HLO protos of many programs (incompressible bulk).
    md = pb.XPlane(id=900, name="/host:metadata")  # type: ignore[attr-defined]  # generated protobuf classes
    md.stat_metadata[1].id = 1
    md.stat_metadata[1].name = "Hlo Proto"
    chunk = 4 * 1024 * 1024
    for i in range(max(1, bulk_mb * 1024 * 1024 // chunk // 2)):
        m = md.event_metadata[i + 1]
        m.id = i + 1
        m.name = f"jit_program_{i}"
        m.stats.add(metadata_id=1, bytes_value=rng.bytes(chunk))
    extra += _field(1, md.SerializeToString())
    # /host:CPU: python / runtime threads with many short events.
    host = pb.XPlane(id=901, name="/host:CPU")  # type: ignore[attr-defined]  # generated protobuf classes
    for k in range(1, 200):
        host.event_metadata[k].id = k
        host.event_metadata[k].name = f"host_fn_{k}"
    per_line = 400_000
    for t in range(max(1, (bulk_mb // 2) // 6)):
        ln = host.lines.add(id=t, name=f"python thread {t}", timestamp_ns=1_732_000_000_000_000_000)
        mids = rng.integers(1, 200, per_line).tolist()
        for j, mid in enumerate(mids):
            ln.events.add(metadata_id=mid, offset_ps=j * 1_000_000, duration_ps=500_000)
    extra += _field(1, host.SerializeToString())
    path.write_bytes(data + bytes(extra))
    print(f"built {path.name}: {path.stat().st_size / 1e6:.0f} MB, {truth['counts']['device_events']:,} device events, {steps} steps")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", type=Path, default=None, help="folder to keep the built trace in (reused when present)")
    ap.add_argument("--events", type=int, default=1_500_000)
    ap.add_argument("--bulk-mb", type=int, default=260)
    ap.add_argument("--layers", type=int, default=48)
    ap.add_argument("--tasks", default="bare_parse,touch_floor,xprof_overlap,profanalyze")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="profanalyzer-e2e-"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"e2e-{args.events}-{args.bulk_mb}.xplane.pb"
    if not path.exists():
        t0 = time.perf_counter()
        build(path, args.events, args.bulk_mb, args.layers)
        print(f"(build took {time.perf_counter() - t0:.0f} s)")
    out = folder / "e2e.report.html"
    warm_up()
    results = {name: best_of(TASKS[name], args.repeat, str(path), str(out)) for name in args.tasks.split(",")}
    floor = results.get("touch_floor", {}).get("seconds")
    print(f"\nfile: {path.stat().st_size / 1e6:.0f} MB; python {sys.version.split()[0]}; {os.cpu_count()} CPUs")
    print(f"{'task':<15}{'seconds':>9}{'wall':>8}{'peak RSS MiB':>14}{'x touch floor':>15}  note")
    for name, r in results.items():
        if "error" in r:
            print(f"{name:<15}{'-':>9}{r['wall']:>8.1f}{'-':>14}{'-':>15}  error: {r['error']}")
            continue
        ratio = f"{r['seconds'] / floor:.2f}" if floor else "-"
        print(f"{name:<15}{r['seconds']:>9.2f}{r['wall']:>8.1f}{r['maxrss_kib'] / 1024:>14.0f}{ratio:>15}  {r['note']}")
    if "xprof_overlap" in results and "profanalyze" in results and "seconds" in results["xprof_overlap"]:
        x, p = results["xprof_overlap"], results["profanalyze"]
        print(f"\nprofanalyze vs XProf overlap: {x['seconds'] / p['seconds']:.1f}x faster, "
              f"peak RSS {p['maxrss_kib'] / x['maxrss_kib']:.2f} of XProf's")
    if args.keep is None:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
