"""Shared child-process runner for the benchmarks: each task runs in a fresh
interpreter and reports its own wall time and peak RSS."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Wraps a task body: PATH and OUT come from argv; the body sets `note`.
RUNNER = """
import json, sys, time
PATH = sys.argv[1]
OUT = sys.argv[2] if len(sys.argv) > 2 else ""
t0 = time.perf_counter()
{body}
dt = time.perf_counter() - t0
# Peak RSS of this process image: VmHWM (ru_maxrss would include the parent's
# peak, which Linux carries across fork+exec).
hwm = [int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")][0]
print(json.dumps({{"seconds": dt, "maxrss_kib": hwm, "note": str(note)}}))
"""


def child_env() -> dict:
    """Bytecode caching as users have it (some sandboxes disable it, which
    would charge every run with compiling the package's sources)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def warm_up() -> None:
    """Import everything once so bytecode caches exist (not timed)."""
    subprocess.run(
        [sys.executable, "-c", "import profanalyzer.cli, profanalyzer.analyze.analysis, profanalyzer.report.html; "
         "from profanalyzer.heuristics import registry; registry()"],
        cwd=ROOT, env=child_env(), check=False,
    )


def run_body(body: str, *args: str) -> dict:
    """Run one task body in a fresh interpreter: seconds (inside), wall
    (including start-up), maxrss_kib, note; or {error, wall}."""
    code = RUNNER.format(body=body)
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, env=child_env())
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        return {"error": (p.stderr.strip().splitlines() or ["?"])[-1], "wall": wall}
    r = json.loads(p.stdout.strip().splitlines()[-1])
    r["wall"] = wall
    return r


def best_of(body: str, repeat: int, *args: str) -> dict:
    best: dict | None = None
    for _ in range(max(1, repeat)):
        r = run_body(body, *args)
        if best is None or ("seconds" in r and r["seconds"] < best.get("seconds", float("inf"))):
            best = r
    return best or {}
