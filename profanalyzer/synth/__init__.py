"""Synthetic TPU7x (Ironwood) XProf captures with ground truth.

No real TPU7x trace is public, so profanalyzer's tests stand on these: realistic
XSpace protobufs (``.xplane.pb``) of MaxText-style training runs, built from a
scenario catalog, a roofline cost model on TPU7x per-core peaks and a schedule
simulation, plus a ``truth.json`` computed from that schedule by construction.

Public API::

    from profanalyzer.synth import SCENARIOS, synthesize, write_scenario

    SCENARIOS                       # name -> Scenario (frozen dataclass)
    files, truth = synthesize("dense_short_fsdp", seed=0, hosts=1, steps=None, layers=None, scale=1.0)
    #   files: list of (hostname, serialized XSpace bytes), one per host, in host order
    #   truth: the ground-truth dict (also what write_scenario writes as JSON)
    truth = write_scenario("dense_short_fsdp", "x.xplane.pb.gz", seed=0, hosts=1, steps=None, layers=None)

Output is byte-for-byte deterministic for a given (scenario, seed, hosts, steps,
layers, scale). See ``sample_traces/README.md`` for the catalog and the truth schema.
"""

from __future__ import annotations

import gzip
import io
import json
import os
from pathlib import Path

from profanalyzer.core import outputs

from . import real_shapes
from .builder import BUCKETS, COLL_BUCKETS
from .hlo_memory import memory_truth
from .model import simulate
from .program import build_plan
from .scenario import LEVERS, Scenario
from .scenarios import SCENARIOS, get_scenario
from .truth import build_truth
from .writer import hostnames_for, plane_names, run_name_for, write_host

__all__ = [
    "SCENARIOS",
    "Scenario",
    "LEVERS",
    "BUCKETS",
    "COLL_BUCKETS",
    "synthesize",
    "write_scenario",
    "truth_path_for",
    "gzip_bytes",
]


def synthesize(
    name_or_spec: str | Scenario,
    *,
    seed: int = 0,
    hosts: int = 1,
    steps: int | None = None,
    layers: int | None = None,
    scale: float = 1.0,
) -> tuple[list[tuple[str, bytes]], dict]:
    """Build the capture(s) and the ground truth of a scenario.

    ``steps``: number of steps captured (step 0 is the warm-up; default: the scenario's; with a
    single step there is nothing to compare it with and no step is dropped);
    ``layers``: trip count of the scanned layer loop (default: the scenario's);
    ``scale``: multiplies the per-core batch (tokens per core).

    Returns ``(files, truth)``: ``files`` is a list of ``(hostname, xspace_bytes)``, one per
    host; ``truth`` is the ground-truth dict (JSON-serializable, ints in picoseconds).
    """
    spec = get_scenario(name_or_spec)
    if hosts < 1:
        raise ValueError("hosts must be >= 1")
    if steps is not None and steps < 1:
        raise ValueError("steps must be >= 1 (step 0 is the warm-up)")
    plan = build_plan(spec, seed=seed, layers=layers, scale=scale, programs_of=real_shapes.PROGRAM_BUILDERS,
                      host_offload=real_shapes.splice_host_offload)
    tl = simulate(plan, seed=seed, hosts=hosts, steps=steps)
    names = hostnames_for(spec.name, seed, hosts)
    truth = build_truth(tl, names, plane_names(tl))
    counts: dict = {}
    files = [(names[h], write_host(tl, h, names[h], seed, counts)) for h in range(hosts)]
    if spec.hlo_memory:  # issue #16: the train program's buffer assignment, from the plan
        truth["memory"] = memory_truth(plan)
    truth["counts"] = {
        "xla_ops_events": counts["xla_ops_events"],
        "device_events": counts["device_events"],
        "op_templates": len(plan.ops),
    }
    return files, truth


def truth_path_for(out_path: str | os.PathLike) -> Path:
    """``x.xplane.pb.gz`` / ``x.xplane.pb`` -> ``x.truth.json``; a directory -> ``DIR/truth.json``."""
    p = Path(out_path)
    n = p.name
    for suf in (".xplane.pb.gz", ".xplane.pb"):
        if n.endswith(suf):
            return p.with_name(n[: -len(suf)] + ".truth.json")
    return p / "truth.json"


def gzip_bytes(data: bytes, level: int = 6) -> bytes:
    """Deterministic gzip: mtime 0 and no file name in the header."""
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, compresslevel=level, mtime=0) as gz:
        gz.write(data)
    return buf.getvalue()


def dump_truth(truth: dict) -> str:
    return json.dumps(truth, sort_keys=True, indent=1) + "\n"


def write_scenario(
    name: str | Scenario,
    out_path: str | os.PathLike,
    *,
    seed: int = 0,
    hosts: int = 1,
    steps: int | None = None,
    layers: int | None = None,
    scale: float = 1.0,
) -> dict:
    """Write a scenario's capture(s) and truth; return the truth dict.

    * ``out_path`` ending ``.xplane.pb`` / ``.xplane.pb.gz``: one host file (gzip for ``.gz``,
      mtime 0 in the header), truth next to it as ``<stem>.truth.json``. Requires hosts == 1.
    * anything else: a run folder ``OUT/plugins/profile/<run_name>/<hostname>.xplane.pb``
      (one file per host) with the truth at ``OUT/truth.json``.

    Each file is written atomically (profanalyzer.core.outputs). Missing folders
    are created here; `profanalyze synth` refuses a missing parent folder
    before it calls this, as every command does.
    """
    out = Path(out_path)
    single = out.name.endswith(".xplane.pb") or out.name.endswith(".xplane.pb.gz")
    if single and hosts != 1:
        raise ValueError("a single .xplane.pb output holds one host; give a directory for hosts > 1")
    files, truth = synthesize(name, seed=seed, hosts=hosts, steps=steps, layers=layers, scale=scale)
    if single:
        if not out.parent.is_dir():
            out.parent.mkdir(parents=True, exist_ok=True)
        data = files[0][1]
        if out.name.endswith(".gz"):
            data = gzip_bytes(data)
        outputs.write_bytes(data, out)
        truth["files"] = [out.name]
    else:
        run = out / "plugins" / "profile" / run_name_for(get_scenario(name).name, seed)
        run.mkdir(parents=True, exist_ok=True)
        rel = []
        for host, data in files:
            f = run / f"{host}.xplane.pb"
            outputs.write_bytes(data, f)
            rel.append(str(f.relative_to(out)).replace(os.sep, "/"))
        truth["files"] = rel
    outputs.write_text(dump_truth(truth), truth_path_for(out))
    return truth
