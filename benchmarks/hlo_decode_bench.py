"""HloProto decoding (issue 33 item 2): the protobuf runtime with the project's
own `hlo_min.proto` against the Python field walk it replaced (the decoder of
BASELINE, loaded from git) and against itself without its C accelerator
(`_hlo.c`), on the largest HloProto of each input, in the same process and the
same run, median of --repeat; and the whole default command on
each capture against XProf's `hlo_stats` converter on a copy of the same file
(fresh interpreters, `_harness.run_body`; XProf only when the `[xprof]` extra
is installed).

    python benchmarks/hlo_decode_bench.py [--repeat 5] CAPTURE_OR_PROGRAM...

Defaults: the real-TPU corpus captures `moe_gmm` (3.8 MB) and `train_remat_full`
unpacked into a temporary folder, and the sample program `dense_fsdp.hlo.pb.gz`.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import ROOT, run_body, warm_up  # noqa: E402

#: The last commit with the field-walk decoder.
BASELINE = "8d1931f"


def _old_decoder(tmp: Path):
    # the file as it was at BASELINE (profanalyzer/hlo/, before the read room)
    src = subprocess.run(["git", "show", f"{BASELINE}:profanalyzer/hlo/proto.py"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    # its imports, at the modules' paths now
    src = src.replace("from profanalyzer.hlo.", "from profanalyzer.read.hlo.").replace(
        "from profanalyzer.xspace import", "from profanalyzer.read.xspace import")
    p = tmp / "old_proto.py"
    p.write_text(src)
    spec = importlib.util.spec_from_file_location("old_proto", p)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod.parse_hlo_proto_bytes


def _largest_proto(path: Path) -> bytes:
    data = path.read_bytes()
    if path.name.endswith(".gz"):
        data = gzip.decompress(data)
    if ".hlo.pb" in path.name:
        return data
    from profanalyzer.read.xspace import xplane_pb2

    space = xplane_pb2.XSpace.FromString(data)  # type: ignore[attr-defined]
    blobs = [s.bytes_value for p in space.planes if p.name == "/host:metadata" for em in p.event_metadata.values()
             for s in em.stats if s.WhichOneof("value") == "bytes_value"]
    return max(blobs, key=len)


def _median_ms(fn, data: bytes, repeat: int) -> float:
    fn(data)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn(data)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


XPROF = """
from pathlib import Path
import sys
sys.path.insert(0, "tests")
from xprof_util import run_converters
run_converters(Path(PATH), ("hlo_stats",))
note = "hlo_stats"
"""
OURS = """
from profanalyzer.cli import main
main(["analyze", PATH, "--json", OUT, "--no-html", "-q"])
note = "analyze --json"
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("inputs", nargs="*")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    from profanalyzer.read.hlo import proto
    from profanalyzer.read.hlo.proto import parse_hlo_proto_bytes as new

    accel = proto._accel

    def python_path(data: bytes):
        """The decoder without its C accelerator (as installed without a compiler)."""
        proto._accel = None
        try:
            return new(data)
        finally:
            proto._accel = accel

    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        inputs = [Path(x) for x in args.inputs]
        if not inputs:
            for name in ("moe_gmm", "train_remat_full"):
                with tarfile.open(ROOT / "sample_traces" / "real-tpu" / f"{name}.tar.gz") as tar:
                    tar.extractall(tmp, filter="data")
                inputs.append(next((tmp / name / "logdir").rglob("*.xplane.pb")))
            inputs.append(ROOT / "sample_traces" / "compiled" / "dense_fsdp.hlo.pb.gz")
        old = _old_decoder(tmp)
        print("| input | HloProto bytes | instructions | field walk ms | protobuf runtime ms (Python path) | "
              "with the C accelerator ms | x (field walk / accelerated) |")
        print("|---|--:|--:|--:|--:|--:|--:|")
        for p in inputs:
            data = _largest_proto(p)
            n = sum(len(c.instructions) for c in new(data).computations)
            a, py = _median_ms(old, data, args.repeat), _median_ms(python_path, data, args.repeat)
            b = _median_ms(new, data, args.repeat) if accel is not None else float("nan")
            print(f"| {p.name if p.parent.name != 'compiled' else p.name} ({p.stat().st_size / 1e6:.1f} MB) | "
                  f"{len(data):,} | {n:,} | {a:.1f} | {py:.1f} | {b:.1f} | {a / b:.2f} |")
        warm_up()
        have_xprof = importlib.util.find_spec("xprof") is not None
        print("\n| capture | profanalyze analyze --json s (median) | XProf hlo_stats s (median) |")
        print("|---|--:|--:|")
        for p in inputs:
            if ".hlo.pb" in p.name:
                continue
            ours = statistics.median(run_body(OURS, str(p), str(tmp / "o.json"))["seconds"] for _ in range(args.repeat))
            xp = (statistics.median(run_body(XPROF, str(p))["seconds"] for _ in range(args.repeat))
                  if have_xprof else float("nan"))
            print(f"| {p.parent.parent.parent.parent.parent.name or p.name} | {ours:.2f} | {xp:.2f} |")


if __name__ == "__main__":
    main()
