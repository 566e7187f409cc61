#!/usr/bin/env python3
"""Capture the real-TPU corpus: small JAX programs run on a lent TPU, each with
its profile, the XLA dump of the same module and the host's wall clock.

On the TPU machine (through the `device` tool; jax is installed there):

    python3 tools/capture_tpu.py all --out $OUT/corpus.tar [--only NAME ...] [--budget-s 480]

Back here, to lay the archives into the repository and rewrite the manifest:

    python3 tools/capture_tpu.py unpack corpus.tar [corpus-2.tar ...]

On a CPU, to test the tool itself at tiny shapes (Pallas kernels interpreted):

    python3 tools/capture_tpu.py all --tiny --out out/corpus.tar --only train_remat_full

Each workload (tools/tpu_workloads.py) runs in its own child process, one
after another (one program at a time can hold the chip). The child sets
XLA_FLAGS to dump the step's module before jax is imported, compiles the step
once (`lower().compile()`: memory_analysis(), cost_analysis(), the dump), runs
warm-up steps, times steps without the profiler (each step waited for, then
back to back), then captures steps back to back under `jax.profiler` with
HLO protos on, each step in a StepTraceAnnotation. It writes

    NAME/logdir/plugins/profile/<run>/<host>.xplane.pb   the capture
    NAME/dump/module_*.jit_<kind>_step.*                 the dump, pruned to the final
                                                         stages, buffer assignment and
                                                         the chip's target arguments
    NAME/truth.json                                      wall clock, compiler figures,
                                                         config, versions, flags

The parent rewrites machine paths in every file to strings of the same length
(protobuf lengths stay valid), packs each workload as NAME.tar.gz (mtime 0,
sorted, owner 0) and all of them into one tar for $OUT. The parent needs no jax.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "sample_traces" / "real-tpu"

#: The dump's files the corpus keeps (the rest repeats these stages in other forms).
KEEP_DUMP = re.compile(
    r"\.(after_codegen\.hlo\.pb|after_optimizations\.hlo\.pb|after_optimizations\.txt"
    r"|after_optimizations-buffer-assignment\.txt|after_optimizations-live-range\.txt"
    r"|after_optimizations-memory-usage-report\.txt|target_arguments\.txt|tpu_comp_env\.txt"
    r"|flagfile|execution_options\.txt|debug_options|hlo_module_config\.txt)$")

STEP_MODULE_RE = "jit_(train|decode|prefill)_step"


# --------------------------------------------------------------------------
# The child: one workload, jax imported here only
# --------------------------------------------------------------------------

def child(name: str, out: Path, tiny: bool, warmup: int, timed: int, steps: int) -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    import jax
    import tpu_workloads as tw

    cfg, what = tw.WORKLOADS[name]
    if tiny:
        cfg = tw.tiny(cfg)
    step, args, advance = tw.build(cfg, jax.random.PRNGKey(0))
    t0 = time.perf_counter()
    compiled = step.lower(*args).compile()
    compile_s = time.perf_counter() - t0
    mem = compiled.memory_analysis()
    memory = {k: int(getattr(mem, k)) for k in dir(mem) if k.endswith("_in_bytes")} if mem is not None else {}
    cost = compiled.cost_analysis()
    if isinstance(cost, list):
        cost = cost[0] if cost else {}
    cost = {k: float(v) for k, v in sorted((cost or {}).items())
            if k in ("flops", "bytes accessed", "transcendentals", "optimal_seconds", "utilization")}

    def run(n: int, block_each: bool) -> list[float]:
        nonlocal args
        times = []
        out_ = None
        for _ in range(n):
            t = time.perf_counter()
            out_ = compiled(*args)
            if block_each:
                jax.block_until_ready(out_)
                times.append((time.perf_counter() - t) * 1e3)
            args = advance(args, out_)
        # the outputs too: a step whose outputs are not its next inputs (prefill) is
        # otherwise timed as its dispatch alone
        jax.block_until_ready((args, out_))
        return times

    run(warmup, True)
    blocking = run(timed, True)
    t = time.perf_counter()
    run(timed, False)
    pipelined = (time.perf_counter() - t) * 1e3 / timed

    logdir = out / "logdir"
    opts = jax.profiler.ProfileOptions()
    opts.python_tracer_level = 0
    opts.host_tracer_level = 1
    opts.enable_hlo_proto = True
    jax.profiler.start_trace(str(logdir), profiler_options=opts)
    for i in range(steps):
        with jax.profiler.StepTraceAnnotation(cfg.kind, step_num=i):
            out_ = compiled(*args)
            args = advance(args, out_)
    jax.block_until_ready((args, out_))
    jax.profiler.stop_trace()

    dev = jax.devices()[0]
    try:
        import jaxlib
        jaxlib_v = jaxlib.__version__
    except Exception:  # pragma: no cover - only the version string
        jaxlib_v = "unknown"
    try:
        from importlib.metadata import version
        libtpu_v = version("libtpu")
    except Exception:
        libtpu_v = "unknown"
    truth = {
        "workload": name,
        "what": what,
        "config": {k: v for k, v in sorted(vars(cfg).items()) if k != "interpret"},
        "tiny": tiny,
        "platform": dev.platform,
        "device_kind": dev.device_kind,
        "jax": jax.__version__,
        "jaxlib": jaxlib_v,
        "libtpu": libtpu_v,
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "compile_s": round(compile_s, 3),
        "memory_analysis": memory,
        "cost_analysis": cost,
        "warmup": warmup,
        "timed": timed,
        "profiled_steps": steps,
        "wall_step_ms_blocking": [round(x, 4) for x in blocking],
        "wall_step_ms_pipelined_mean": round(pipelined, 4),
        #: the profiled steps' outputs were waited for before stop_trace (captures before this field
        #: existed waited only for the next step's inputs: a prefill step, whose outputs are not its
        #: next inputs, was captured in part or not at all)
        "outputs_waited": True,
    }
    (out / "truth.json").write_text(json.dumps(truth, indent=1, sort_keys=True) + "\n")


# --------------------------------------------------------------------------
# The parent: children one after another, paths rewritten, archives packed
# --------------------------------------------------------------------------

def same_length(old: str, new: str) -> str:
    """`new` padded with '/' (a path reads the same with repeated slashes) or
    cut to the length of `old`."""
    return (new + "/" * len(old))[: len(old)]


def path_rewrites(work: Path) -> list[tuple[bytes, bytes]]:
    """Machine paths that land in captures and dumps, each to a same-length string."""
    import sysconfig

    found: dict[str, str] = {}
    for key in ("purelib", "platlib", "stdlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            found[p] = "/lib"
    for p in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        if p and len(p) > 4:
            found[os.path.abspath(p)] = "/lib"
    found[str(work)] = "/tmp/work"
    found[str(ROOT)] = "/src"
    found[os.path.expanduser("~")] = "/home"
    found[sys.prefix] = "/usr"
    out = []
    for old, new in sorted(found.items(), key=lambda kv: -len(kv[0])):
        if len(old) >= len(new) and old not in ("/", ""):
            out.append((old.encode(), same_length(old, new).encode()))
    return out


def rewrite_paths(folder: Path, rewrites: list[tuple[bytes, bytes]]) -> None:
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        data = f.read_bytes()
        new = data
        for old, rep in rewrites:
            new = new.replace(old, rep)
        assert len(new) == len(data)
        if new != data:
            f.write_bytes(new)


def prune(wdir: Path) -> None:
    """Keep the step module's final stages in the dump and the capture's
    xplane.pb; drop the rest (other modules, MLIR folders, trace.json.gz)."""
    dump = wdir / "dump"
    for f in list(dump.iterdir()) if dump.exists() else []:
        if f.is_dir():
            shutil.rmtree(f)
        elif not (KEEP_DUMP.search(f.name) and re.search(STEP_MODULE_RE, f.name)):
            f.unlink()
    for f in (wdir / "logdir").rglob("*"):
        if f.is_file() and not f.name.endswith(".xplane.pb"):
            f.unlink()


def pack(folder: Path, dest: Path) -> None:
    """folder as dest (.tar.gz), reproducible: sorted, mtime 0, owner 0."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for p in [folder, *sorted(folder.rglob("*"))]:
            info = tar.gettarinfo(str(p), arcname=str(p.relative_to(folder.parent)))
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mode = 0o755 if p.is_dir() else 0o644
            if p.is_file():
                with open(p, "rb") as fh:
                    tar.addfile(info, fh)
            else:
                tar.addfile(info)
    with open(dest, "wb") as fh, gzip.GzipFile(filename="", mode="wb", fileobj=fh, mtime=0, compresslevel=9) as gz:
        gz.write(buf.getvalue())


def run_all(args: argparse.Namespace) -> int:
    sys.path.insert(0, str(ROOT / "tools"))
    names = args.only or list(_workload_names())
    out_tar = Path(args.out)
    out_tar.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="capture_tpu_"))
    rewrites = path_rewrites(work)
    start = time.monotonic()
    done, failed, skipped = [], {}, []
    log = []
    for name in names:
        if time.monotonic() - start > args.budget_s:
            skipped.append(name)
            continue
        wdir = work / name
        wdir.mkdir()
        env = dict(os.environ)
        flags = (f"--xla_dump_to={wdir / 'dump'} --xla_dump_hlo_as_proto --xla_dump_hlo_as_text "
                 f"--xla_dump_hlo_module_re={STEP_MODULE_RE}")
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " " + flags).strip()
        if args.tiny:
            env["JAX_PLATFORMS"] = "cpu"
        cmd = [sys.executable, __file__, "child", name, "--out", str(wdir), "--warmup", str(args.warmup),
               "--timed", str(args.timed), "--steps", str(args.steps)] + (["--tiny"] if args.tiny else [])
        t = time.monotonic()
        for attempt in range(2):  # the chip can refuse a program started just after another ended
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.child_timeout_s)
            if proc.returncode == 0 or "lockfile" not in proc.stderr or attempt:
                break
            time.sleep(5)
        secs = time.monotonic() - t
        log.append(f"== {name}: rc {proc.returncode} in {secs:.1f} s\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
        print(f"{name}: rc {proc.returncode} in {secs:.1f} s", flush=True)
        if proc.returncode != 0 or not (wdir / "truth.json").exists():
            failed[name] = proc.stderr.strip().splitlines()[-1:] or ["no output"]
            shutil.rmtree(wdir, ignore_errors=True)
            continue
        prune(wdir)
        truth = json.loads((wdir / "truth.json").read_text())
        truth["captured_s"] = round(secs, 1)
        (wdir / "truth.json").write_text(json.dumps(truth, indent=1, sort_keys=True) + "\n")
        rewrite_paths(wdir, rewrites)
        pack(wdir, work / f"{name}.tar.gz")
        shutil.rmtree(wdir)
        done.append(name)
        time.sleep(2)
    summary = {"done": done, "failed": failed, "skipped": skipped, "host": platform.node(),
               "elapsed_s": round(time.monotonic() - start, 1)}
    (work / "capture_summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    (work / "capture_log.txt").write_text("\n".join(log))
    # $OUT takes files of 16 MiB at most: one tar per ~14 MB of archives
    groups: list[list[Path]] = [[]]
    size = 0
    for f in sorted(work.iterdir(), key=lambda p: (p.suffix != ".json", p.name)):
        if groups[-1] and size + f.stat().st_size > 14e6:
            groups.append([])
            size = 0
        groups[-1].append(f)
        size += f.stat().st_size
    for i, group in enumerate(groups):
        dest = out_tar if i == 0 else out_tar.with_name(f"{out_tar.stem}-{i + 1}{out_tar.suffix}")
        with tarfile.open(dest, "w") as tar:
            for f in group:
                tar.add(str(f), arcname=f.name)
    shutil.rmtree(work)
    print(json.dumps(summary, indent=1))
    return 0 if done else 1


def _workload_names() -> list[str]:
    import tpu_workloads as tw
    return list(tw.WORKLOADS)


# --------------------------------------------------------------------------
# Back here: lay the archives in the repository, write the manifest
# --------------------------------------------------------------------------

def _capture_has_device(archive: Path) -> bool:
    """The capture holds a TPU device plane. `capture_complete` in the manifest is false where it
    holds none or where the step's outputs were not waited for before stop_trace (the prefill captures
    of 2026-12-05: a bug of `child`, fixed since; their dumps and wall clock stand)."""
    with tarfile.open(archive) as tar:
        for m in tar.getmembers():
            if m.name.endswith(".xplane.pb"):
                f = tar.extractfile(m)
                return f is not None and b"/device:TPU:" in f.read()
    return False


def _truth_of(archive: Path) -> dict:
    with tarfile.open(archive) as tar:
        for m in tar.getmembers():
            if m.name.endswith("/truth.json"):
                f = tar.extractfile(m)
                assert f is not None
                return json.loads(f.read())
    raise SystemExit(f"{archive}: no truth.json")


def unpack(args: argparse.Namespace) -> int:
    CORPUS.mkdir(parents=True, exist_ok=True)
    for t in args.tars:
        with tarfile.open(t) as tar:
            for m in tar.getmembers():
                if m.name.endswith(".tar.gz") and "/" not in m.name:
                    f = tar.extractfile(m)
                    assert f is not None
                    (CORPUS / m.name).write_bytes(f.read())
                elif m.name in ("capture_summary.json", "capture_log.txt"):
                    f = tar.extractfile(m)
                    assert f is not None
                    print(f"--- {t}: {m.name}\n{f.read().decode()[:2000]}")
    write_manifest()
    return 0


def measured_step_ms(truth: dict) -> float:
    """The step the corpus holds as truth: the back-to-back mean (as in the
    capture), or the median of the steps waited for where the back-to-back
    figure is below it by more than the host's per-step wait could explain
    (half): captures made before the fix of `run` timed a prefill step's
    dispatch alone there."""
    blocking = sorted(truth["wall_step_ms_blocking"])
    median = blocking[len(blocking) // 2]
    pipelined = truth["wall_step_ms_pipelined_mean"]
    return round(pipelined if pipelined >= 0.5 * median else median, 4)


def write_manifest() -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    import tpu_workloads as tw

    programs = []
    for archive in sorted(CORPUS.glob("*.tar.gz")):
        truth = _truth_of(archive)
        programs.append({
            "archive": archive.name,
            "workload": truth["workload"],
            "what": truth.get("what", ""),
            "device_kind": truth["device_kind"],
            "jax": truth["jax"],
            "jaxlib": truth.get("jaxlib"),
            "libtpu": truth.get("libtpu"),
            "wall_step_ms_pipelined_mean": truth["wall_step_ms_pipelined_mean"],
            "measured_step_ms": measured_step_ms(truth),
            "capture_complete": _capture_has_device(archive) and (
                truth.get("outputs_waited", False) or truth["config"].get("kind") != "prefill"),
            "bytes": archive.stat().st_size,
        })
    have = {p["workload"] for p in programs}
    manifest = {
        "what": "Small JAX programs run on a lent TPU v5e, captured with jax.profiler and dumped by XLA",
        "regenerate": "python3 tools/capture_tpu.py all --out $OUT/corpus.tar (on the TPU), then "
                      "python3 tools/capture_tpu.py unpack corpus.tar",
        "truth": "measured_step_ms: wall_step_ms_pipelined_mean (steps back to back, as captured), or the "
                 "median of wall_step_ms_blocking where the back-to-back figure is under half of it (captures made "
                 "before the tool waited for a step's outputs timed a prefill's dispatch alone there; the corpus' "
                 "prefills were taken again since, every program here is back to back)",
        "paths": "machine paths rewritten to same-length strings: /src (the repository), /lib (site-packages), "
                 "/tmp/work (the capture's work folder), padded with '/'",
        "programs": programs,
        "pairs": [{"before": a, "after": b, "lever": lever} for a, b, lever in tw.PAIRS if a in have and b in have],
        "total_bytes": sum(p["bytes"] for p in programs),
    }
    (CORPUS / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"{len(programs)} programs, {manifest['total_bytes'] / 1e6:.1f} MB, {len(manifest['pairs'])} pairs")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("all", help="run workloads one per child process, pack them into one tar")
    a.add_argument("--out", required=True)
    a.add_argument("--only", nargs="*")
    a.add_argument("--tiny", action="store_true", help="tiny shapes on the CPU (tests of the tool)")
    a.add_argument("--budget-s", type=float, default=480.0, help="start no workload after this many seconds")
    a.add_argument("--child-timeout-s", type=float, default=240.0)
    a.add_argument("--warmup", type=int, default=3)
    a.add_argument("--timed", type=int, default=10)
    a.add_argument("--steps", type=int, default=5)
    c = sub.add_parser("child", help="(internal) run one workload")
    c.add_argument("name")
    c.add_argument("--out", required=True)
    c.add_argument("--tiny", action="store_true")
    c.add_argument("--warmup", type=int, default=3)
    c.add_argument("--timed", type=int, default=10)
    c.add_argument("--steps", type=int, default=5)
    u = sub.add_parser("unpack", help="lay archives from `all` under sample_traces/real-tpu/")
    u.add_argument("tars", nargs="+")
    sub.add_parser("list", help="the workloads and pairs")
    ns = ap.parse_args(argv)
    if ns.cmd == "child":
        child(ns.name, Path(ns.out), ns.tiny, ns.warmup, ns.timed, ns.steps)
        return 0
    if ns.cmd == "all":
        return run_all(ns)
    if ns.cmd == "unpack":
        return unpack(ns)
    sys.path.insert(0, str(ROOT / "tools"))
    import tpu_workloads as tw
    for n, (_, what) in tw.WORKLOADS.items():
        print(f"{n:24s} {what}")
    for a_, b_, lever in tw.PAIRS:
        print(f"pair: {a_} -> {b_} ({lever})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
