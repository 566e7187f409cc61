"""Peak memory and time on a `.xplane.pb.gz` against its decompressed size
(issue #15: stream the top-level planes, skip host planes without holding them).

    python benchmarks/gz_bench.py [--keep DIR] [--before SRC_TREE] [--tasks ...] [--repeat 1]

Builds (once; reused from --keep, default /tmp/profanalyzer-gzbench) the
end-to-end benchmark's file (`e2e_bench.build`: 1.5M device events plus
~260 MB of host-plane and `/host:metadata` bulk) and its `gzip -1` copy. Each
task runs in a fresh interpreter (`_harness.py`): seconds, wall, peak RSS
(VmHWM). Tasks:

  inflate_all    the whole file decompressed into memory and indexed
                 (`read_bytes` + `scan_space`: what the reader did before)
  open_device    `open_space(..., want=device planes)`: streamed, only the
                 TensorCore/SparseCore planes held
  profanalyze_gz / profanalyze_plain   `profanalyze FILE -o x.html -q`
  memory_gz      the same with `--memory` on the .gz (/host:metadata and the
                 host planes held too)
  before_gz      `profanalyze FILE.gz -o x.html -q` with the package of
                 --before (a source tree of an earlier commit, e.g. from
                 `git archive`), when given

No timing is asserted anywhere; numbers go into benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import best_of, warm_up  # noqa: E402

_DEVICE = "want=lambda r: r.kind in ('tensorcore', 'sparsecore')"

TASKS = {
    "inflate_all": (
        "from pathlib import Path\n"
        "from profanalyzer.read.xspace import capturefile, reader\n"
        "buf = capturefile.read_bytes(Path(PATH)); index = reader.scan_space(buf, Path(PATH))\n"
        "note = f'{len(buf) / 1e6:.0f} MB held, {len(index.planes)} planes'\n"
    ),
    "open_device": (
        "from pathlib import Path\n"
        "from profanalyzer.read.xspace import reader\n"
        f"buf, index = reader.open_space(Path(PATH), {_DEVICE})\n"
        "note = f'{len(buf) / 1e6:.0f} MB held of {index.size / 1e6:.0f} MB, {sum(r.held for r in index.planes)} of {len(index.planes)} planes'\n"
    ),
    "profanalyze": (
        "import sys\n"
        "if len(sys.argv) > 3: sys.path.insert(0, sys.argv[3])\n"
        "from profanalyzer.cli import main\n"
        "rc = main([PATH, '-o', OUT, '-q'])\n"
        "note = f'rc {rc}'\n"
    ),
    "memory": (
        "from profanalyzer.cli import main\n"
        "rc = main([PATH, '-o', OUT, '-q', '--memory'])\n"
        "note = f'rc {rc}'\n"
    ),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", type=Path, default=Path("/tmp/profanalyzer-gzbench"))
    ap.add_argument("--before", type=Path, default=None, help="source tree of an earlier version (before_gz)")
    ap.add_argument("--tasks", default="inflate_all,open_device,profanalyze_gz,profanalyze_plain,memory_gz,before_gz")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    args.keep.mkdir(parents=True, exist_ok=True)
    plain = args.keep / "e2e.xplane.pb"
    gz = args.keep / "e2e.xplane.pb.gz"
    if not plain.exists():
        from e2e_bench import build

        build(plain, 1_500_000, 260, 48)
    if not gz.exists():
        subprocess.run(["gzip", "-1", "-k", "-f", str(plain)], check=True)
    out = str(args.keep / "x.html")
    warm_up()
    load = os.getloadavg()[0]
    runs = {
        "inflate_all": ("inflate_all", gz, ()),
        "open_device": ("open_device", gz, ()),
        "profanalyze_gz": ("profanalyze", gz, ()),
        "profanalyze_plain": ("profanalyze", plain, ()),
        "memory_gz": ("memory", gz, ()),
        "before_gz": ("profanalyze", gz, (str(args.before),) if args.before else None),
    }
    results = {}
    for name in args.tasks.split(","):
        task, path, extra = runs[name]
        if extra is None:
            continue
        results[name] = best_of(TASKS[task], args.repeat, str(path), out, *extra)
    print(f"\n{gz.name}: {gz.stat().st_size / 1e6:.0f} MB compressed, {plain.stat().st_size / 1e6:.0f} MB decompressed; "
          f"python {sys.version.split()[0]}; {os.cpu_count()} CPUs; 1-min load average {load:.2f} at the start")
    print(f"{'task':<19}{'seconds':>9}{'wall':>8}{'peak RSS MiB':>14}{'x decompressed':>16}  note")
    for name, r in results.items():
        if "error" in r:
            print(f"{name:<19}{'-':>9}{r['wall']:>8.1f}{'-':>14}{'-':>16}  error: {r['error']}")
            continue
        frac = r["maxrss_kib"] * 1024 / plain.stat().st_size
        print(f"{name:<19}{r['seconds']:>9.2f}{r['wall']:>8.1f}{r['maxrss_kib'] / 1024:>14.0f}{frac:>16.2f}  {r['note']}")


if __name__ == "__main__":
    main()
