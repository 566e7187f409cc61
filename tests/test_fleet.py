"""Fleet scale (issue 9): many hosts and many runs on a Dask cluster.

The fleet: one pod run of 8 synthesized hosts (``dense_short_fsdp``) with a
planted straggler host and a planted corrupt host file, plus 3 nightly runs of
another scenario (``well_tuned``, 2 hosts each; the third regressed). A local
Dask cluster with 2 workers analyses it; the result must equal the sequential
path's.

The straggler host: the synthesizer slows a *core* on every host
(``straggler_core``), not one host. So host ``w-5`` of the pod run is replaced
by host 5 of the same scenario synthesized with slower matmuls
(``matmul_eff=0.55``): the same scenario name and seed give the same host names,
so the planted file is a genuine ``w-5`` whose matmuls run ~40% slower.

Dask tests skip when ``dask[distributed]`` (the ``[fleet]`` extra) is missing;
the sequential, report and import tests run regardless.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from profanalyzer import fleet as fl
from profanalyzer.synth import SCENARIOS, synthesize, write_scenario
from profanalyzer.synth.writer import run_name_for


def _has_dask() -> bool:
    try:
        return importlib.util.find_spec("dask") is not None and importlib.util.find_spec("distributed") is not None
    except (ImportError, ValueError):
        return False


HAS_DASK = _has_dask()
needs_dask = pytest.mark.skipif(not HAS_DASK, reason="dask[distributed] not installed (pip install 'profanalyzer[fleet]')")

POD_RUN = "2026_11_30_10_00_00"
NIGHTLY_RUNS = ("2026_11_21_02_00_00", "2026_11_22_02_00_00", "2026_11_23_02_00_00")
SMALL = dict(steps=4, layers=2)


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}


@pytest.fixture(scope="module")
def fleet_dir(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("fleet")
    # Pod run: 8 hosts, renamed to a known timestamp.
    pod = root / "pod"
    write_scenario("dense_short_fsdp", pod, hosts=8, seed=3, **SMALL)
    run = pod / "plugins" / "profile" / run_name_for("dense_short_fsdp", 3)
    run = run.rename(run.with_name(POD_RUN))
    hosts = sorted(p.name for p in run.iterdir())
    # Straggler host: host 5 of a slower variant (same names) replaces w-5.
    slow = SCENARIOS["dense_short_fsdp"].with_(matmul_eff=0.55)
    files, _ = synthesize(slow, seed=3, hosts=6, **SMALL)
    straggler, data = files[5]
    assert f"{straggler}.xplane.pb" in hosts
    (run / f"{straggler}.xplane.pb").write_bytes(data)
    # Corrupt host file: a truncated upload of host 0, as a 9th host.
    prefix = straggler.rsplit("-", 1)[0]
    corrupt = run / f"{prefix}-8.xplane.pb"
    corrupt.write_bytes((run / hosts[0]).read_bytes()[:300_000])
    # Nightly runs of another scenario; the third has slower FP8 matmuls.
    nightly = root / "nightly"
    for i, seed in enumerate((1, 2, 3)):
        spec = SCENARIOS["well_tuned"] if i < 2 else SCENARIOS["well_tuned"].with_(matmul_eff=0.45)
        write_scenario(spec, nightly / f"n{i}", hosts=2, seed=seed, **SMALL)
        r = next((nightly / f"n{i}" / "plugins" / "profile").iterdir())
        r.rename(r.with_name(NIGHTLY_RUNS[i]))
    return {
        "root": root,
        "pod": pod,
        "pod_run": run,
        "nightly": nightly,
        "straggler": straggler,
        "corrupt": str(corrupt),
        "paths": [str(pod), str(nightly)],
    }


@pytest.fixture(scope="module")
def scheduler():
    pytest.importorskip("distributed")
    before = dict(os.environ)
    cluster = fl.start_local_cluster(2)
    assert dict(os.environ) == before  # Dask's nannies would poison this process's environment
    try:
        yield cluster.scheduler_address
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def sequential(fleet_dir):
    return fl.run_fleet(fleet_dir["paths"], workers=0, use_cache=False)


# ---------------------------------------------------------------------------
# Expansion
# ---------------------------------------------------------------------------


def test_expand_runs_sorted_by_time(fleet_dir, tmp_path):
    exp = fl.expand_paths(fleet_dir["paths"] + [str(tmp_path / "missing.xplane.pb"), str(tmp_path / "*.xplane.pb"), str(tmp_path)])
    assert [r.name for r in exp.runs] == [*NIGHTLY_RUNS, POD_RUN]
    assert all(r.time_source == "folder name" for r in exp.runs)
    assert exp.runs[-1].time == "2026-11-30T10:00:00Z"
    assert len(exp.runs[-1].files) == 9 and len(exp.files) == 15
    # hosts in natural order (w-2 before w-10), missing paths and empty globs are failures
    assert [fl.host_stem(f)[-3:] for f in exp.runs[-1].files] == [f"w-{i}" for i in range(9)]
    errors = [f.error for f in exp.failures]
    assert any("missing.xplane.pb: no such file or directory" in e for e in errors)
    assert any("matches no host files" in e for e in errors)
    assert any("no *.xplane.pb files here" in e for e in errors)
    # a glob over run folders, and a single host file
    g = fl.expand_paths([str(fleet_dir["nightly"] / "*" / "plugins" / "profile" / "*"), fleet_dir["corrupt"]])
    assert [r.name for r in g.runs] == [*NIGHTLY_RUNS, POD_RUN] and len(g.files) == 7 and not g.failures
    # the same file twice is analysed once
    assert len(fl.expand_paths([str(fleet_dir["pod"]), str(fleet_dir["pod_run"])]).files) == 9


def test_same_run_name_in_two_log_dirs(fleet_dir, tmp_path):
    import shutil

    for exp_name in ("expA", "expB"):
        shutil.copytree(fleet_dir["nightly"] / "n0", tmp_path / exp_name)
    exp = fl.expand_paths([str(tmp_path)])
    assert [r.name for r in exp.runs] == [f"expA/{NIGHTLY_RUNS[0]}", f"expB/{NIGHTLY_RUNS[0]}"]
    assert all(len(r.files) == 2 for r in exp.runs)


def test_run_time_falls_back_to_mtime():
    assert fl.run_time("2026_11_30_10_00_00", None)[:2] == ("2026-11-30T10:00:00Z", "folder name")
    t, src, key = fl.run_time("my-run", 0.0)
    assert (t, src, key) == ("1970-01-01T00:00:00Z", "modification time", 0.0)
    assert fl.run_time("my-run", None)[1] == "unknown"


# ---------------------------------------------------------------------------
# The acceptance checks: pod view, straggler, corrupt file, Dask == sequential
# ---------------------------------------------------------------------------


def test_sequential_pod_view(fleet_dir, sequential):
    r = sequential
    assert [x.run for x in r.runs] == [*NIGHTLY_RUNS, POD_RUN]
    pod = r.runs[-1]
    assert (pod.hosts_total, pod.hosts_ok, pod.hosts_failed) == (9, 8, 1)
    assert pod.stragglers == (fleet_dir["straggler"],)
    assert pod.slowest_host == fleet_dir["straggler"]
    assert pod.critical.host == fleet_dir["straggler"] and pod.critical.bucket == "matmul_bf16"
    strag = next(h for h in pod.hosts if h.host == fleet_dir["straggler"])
    assert strag.step_z > fl.STRAGGLER_Z and "above the pod median" in strag.straggler_reasons[0]
    # no false stragglers; nightly runs have 2 hosts: the check is skipped there
    assert sum(len(x.stragglers) for x in r.runs) == 1
    assert all(x.straggler_check.startswith("skipped") for x in r.runs[:3])
    # the corrupt file: reported with its one-line error, the run completed
    assert len(r.failures) == 1
    f = r.failures[0]
    assert f.path == fleet_dir["corrupt"] and f.run == POD_RUN and f.error_type == "InputError"
    assert "truncated or corrupt" in f.error and "\n" not in f.error
    bad = next(h for h in pod.hosts if not h.ok)
    assert bad.error == f.error and bad.step_ps is None
    assert (r.files, r.files_ok, r.files_failed) == (15, 14, 1)
    # buckets of a run sum to its step time
    for x in r.runs:
        assert abs(sum(x.buckets.values()) - x.step_ps) < 1e-6 * x.step_ps


def test_sequential_trend(sequential):
    t = sequential.trend
    assert [row.run for row in t.rows] == [*NIGHTLY_RUNS, POD_RUN]
    assert t.metrics[0] == "step_time" and "idle" in t.metrics
    assert t.rows[0].regressed == t.rows[1].regressed == ()
    assert {"step_time", "matmul_fp8"} <= set(t.rows[2].regressed)
    first = t.first_regression["step_time"]
    assert first.run == NIGHTLY_RUNS[2] and first.baseline_runs == 2 and first.delta_ps > first.threshold_ps > 0
    assert t.first_regression["matmul_fp8"].run == NIGHTLY_RUNS[2]


@needs_dask
def test_dask_equals_sequential(fleet_dir, sequential, scheduler):
    d = fl.run_fleet(fleet_dir["paths"], scheduler=scheduler, use_cache=False)
    assert d.to_dict() == sequential.to_dict()
    assert json.dumps(d.to_dict(), sort_keys=True) == json.dumps(sequential.to_dict(), sort_keys=True)


# ---------------------------------------------------------------------------
# Cache
# ---------------------------------------------------------------------------


@needs_dask
def test_cache_hits_on_rerun_and_no_cache_bypasses(fleet_dir, sequential, scheduler, tmp_path):
    cache = tmp_path / "cache"
    before = _tree(fleet_dir["root"])
    first = fl.run_fleet(fleet_dir["paths"], scheduler=scheduler, cache_dir=cache)
    assert first.cache == {"enabled": True, "hits": 0, "analysed": 15}
    store = fl.RecordCache(cache)
    assert store.entries() == 15  # 14 records and the corrupt file's error
    entries = _tree(cache)
    again = fl.run_fleet(fleet_dir["paths"], scheduler=scheduler, cache_dir=cache)
    assert again.cache == {"enabled": True, "hits": 15, "analysed": 0}
    a, b, s = first.to_dict(), again.to_dict(), sequential.to_dict()
    for x in (a, b, s):
        x.pop("cache")
    assert a == b == s  # a cached record is the fresh one
    off = fl.run_fleet(fleet_dir["paths"], scheduler=scheduler, cache_dir=cache, use_cache=False)
    assert off.cache == {"enabled": False, "hits": 0, "analysed": 15}
    assert _tree(cache) == entries  # --no-cache neither read nor wrote
    assert _tree(fleet_dir["root"]) == before  # nothing written next to the traces


def test_cache_counts_analyses(fleet_dir, tmp_path, monkeypatch):
    """Count real analyses (sequential path): a rerun analyses nothing, --no-cache everything."""
    import profanalyzer.read.trace as analysis

    calls = []
    real = analysis.read_trace  # run() reads each file it analyses once
    monkeypatch.setattr(analysis, "read_trace", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    monkeypatch.setenv("PROFANALYZER_CACHE_DIR", str(tmp_path / "envcache"))
    paths = [str(fleet_dir["nightly"])]
    fl.run_fleet(paths, workers=0)
    assert len(calls) == 6
    assert fl.RecordCache(tmp_path / "envcache").entries() == 6  # the env var picked the dir
    fl.run_fleet(paths, workers=0)
    assert len(calls) == 6
    fl.run_fleet(paths, workers=0, use_cache=False)
    assert len(calls) == 12
    # a changed file is a new key; options are part of the key
    key = fl.RecordCache.key("0" * 64, fl.FleetOptions())
    assert key != fl.RecordCache.key("1" * 64, fl.FleetOptions()) != fl.RecordCache.key("0" * 64, fl.FleetOptions(chip="v6e"))
    monkeypatch.setattr(fl.cache, "code_fingerprint", lambda: "edited checkout")
    assert fl.RecordCache.key("0" * 64, fl.FleetOptions()) != key  # the code is part of the key
    monkeypatch.undo()
    monkeypatch.setattr(analysis, "read_trace", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    monkeypatch.setenv("PROFANALYZER_CACHE_DIR", str(tmp_path / "envcache"))
    # a corrupt cache entry is a miss, then rewritten
    store = fl.RecordCache(tmp_path / "envcache")
    victim = next(store.base.glob("*/*.json"))
    victim.write_text("{not json")
    fl.run_fleet(paths, workers=0)
    assert len(calls) == 13 and json.loads(victim.read_text())["record"]
    # a corrupt file's error is cached too, and names the path it is found at now
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "h.xplane.pb").write_bytes(Path(fleet_dir["corrupt"]).read_bytes())
    one = fl.run_fleet([str(tmp_path / "a")], workers=0)
    two = fl.run_fleet([str(tmp_path / "b")], workers=0)
    assert len(calls) == 14  # the second copy came from the cache
    assert (one.cache["hits"], two.cache["hits"]) == (0, 1)
    assert two.failures[0].error == one.failures[0].error.replace(str(tmp_path / "a"), str(tmp_path / "b"))
    assert two.failures[0].error.startswith(str(tmp_path / "b" / "h.xplane.pb") + ": truncated or corrupt")


def test_code_fingerprint_covers_the_package_and_the_rules():
    # The cache key must change when any analysis or rule source changes: the
    # fingerprint hashes all of profanalyzer (not only the fleet package) and heuristics.
    labels = [label for label, _ in fl.cache.fingerprint_sources()]
    assert "profanalyzer/analyze/analysis.py" in labels and "profanalyzer/fleet/records.py" in labels
    assert any(label.startswith("heuristics/") for label in labels)
    assert len(labels) == len(set(labels))


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.delenv("PROFANALYZER_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert fl.default_cache_dir() == tmp_path / "xdg" / "profanalyzer"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert fl.default_cache_dir() == Path.home() / ".cache" / "profanalyzer"
    monkeypatch.setenv("PROFANALYZER_CACHE_DIR", str(tmp_path / "mine"))
    assert fl.default_cache_dir() == tmp_path / "mine"


# ---------------------------------------------------------------------------
# URLs (fsspec), failure isolation of single tasks
# ---------------------------------------------------------------------------


def test_fsspec_url(fleet_dir, sequential):
    pytest.importorskip("fsspec")
    url = "file://" + str(fleet_dir["pod"])
    r = fl.run_fleet([url], workers=0, use_cache=False)
    assert len(r.runs) == 1 and r.runs[0].run == POD_RUN
    assert r.runs[0].stragglers == (fleet_dir["straggler"],)
    assert r.runs[0].hosts[0].path.startswith("file://")
    # the error names the URL, not the temp copy
    assert len(r.failures) == 1 and r.failures[0].error.startswith("file://") and "profanalyzer-" not in r.failures[0].error
    seq_pod = sequential.runs[-1]
    assert [h.step_ps for h in r.runs[0].hosts] == [h.step_ps for h in seq_pod.hosts]
    assert fl.expand_paths(["file://" + str(fleet_dir["root"] / "nope")]).failures[0].error.endswith("no such file or directory")


def test_task_never_raises(tmp_path):
    out = fl.analyse_host_file(str(tmp_path / "gone.xplane.pb"), use_cache=False)
    assert out["ok"] is False and out["error"].endswith("gone.xplane.pb: no such file or directory")
    (tmp_path / "empty.xplane.pb").write_bytes(b"")
    out = fl.analyse_host_file(str(tmp_path / "empty.xplane.pb"), use_cache=False)
    assert out["ok"] is False and "empty file" in out["error"] and out["error_type"] == "InputError"


def test_no_host_files_is_an_input_error(tmp_path):
    from profanalyzer.core.errors import InputError

    with pytest.raises(InputError, match="no host files"):
        fl.run_fleet([str(tmp_path)], workers=0)


def test_missing_dask_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "dask.distributed", None)
    with pytest.raises(fl.FleetDependencyError, match=r"profanalyzer\[fleet\]"):
        fl.analyse_dask(["x.xplane.pb"], fl.FleetOptions(), None, False)


# ---------------------------------------------------------------------------
# Aggregation rules on hand-made records
# ---------------------------------------------------------------------------


def _out(step_ms: float, wait_ms: float = 1.0, matmul_extra_ms: float = 0.0) -> dict:
    buckets = {b: 0.0 for b in fl.bucket_names()}
    buckets["idle"] = wait_ms * 1e9
    buckets["matmul_bf16"] = (step_ms - wait_ms) * 1e9
    rec = {
        "hostnames": ["h"], "tensorcores": 8, "steps": {"kept": 3, "mean_ps": step_ms * 1e9, "median_ps": step_ms * 1e9},
        "buckets": buckets, "idle_ps": wait_ms * 1e9, "exposed_comm_ps": 0.0, "remat_ps": 0.0, "mfu": 0.5,
        "straggler_cores": [], "workload": "dense, short sequence", "recommendations": [], "chip": "TPU7x",
    }
    return {"ok": True, "cached": False, "sha256": "0" * 64, "record": rec}


def _run(name: str, outs: list[dict]) -> fl.RunResult:
    files = tuple(f"/x/{name}/h{i}.xplane.pb" for i in range(len(outs)))
    t, src, key = fl.run_time(name, None)
    return fl.pod_view(fl.RunInput(name, f"/x/{name}", name, t, src, key, files), outs, fl.bucket_names())


def test_straggler_rule():
    r = _run("2026_01_01_00_00_00", [_out(100), _out(100.1), _out(99.9), _out(100.05), _out(100.2, wait_ms=0.1)])
    assert r.stragglers == ()  # 0.2% slower and 0.9 ms less wait: under the 0.5%-of-step floor
    r = _run("2026_01_01_00_00_00", [_out(100, 6), _out(100.1, 6), _out(99.9, 6), _out(100.05, 6), _out(100, wait_ms=0.5)])
    assert r.stragglers == ("h4",)
    assert "the other hosts wait for it" in r.hosts[4].straggler_reasons[0]
    r = _run("2026_01_01_00_00_00", [_out(100), _out(150)])
    assert r.stragglers == () and r.straggler_check.startswith("skipped: 2 analysed hosts")
    assert r.slowest_host == "h1" and r.critical.bucket == "matmul_bf16" and r.critical.excess_ps > 0


def test_regression_rule():
    steps = [100, 101, 99, 100.4, 100.6, 100.2, 104, 104.5]  # run 6 (+4%) is the first regression
    runs = [_run(f"2026_01_{i + 1:02d}_00_00_00", [_out(s)] * 3) for i, s in enumerate(steps)]
    t = fl.trend(runs, fl.bucket_names())
    first = t.first_regression["step_time"]
    assert first.run == "2026_01_07_00_00_00"
    assert first.noise_ps > 0 and first.baseline_runs == 6
    assert first.threshold_ps == pytest.approx(max(3 * first.noise_ps, 0.01 * first.baseline_ps))
    assert [r.regressed for r in t.rows][:6] == [()] * 6
    assert "step_time" in t.rows[7].regressed  # still regressed against the older baseline
    # the 1-point floor: +0.8% is not a regression even with no noise
    flat = [_run(f"2026_02_{i + 1:02d}_00_00_00", [_out(s)] * 3) for i, s in enumerate([100, 100, 100, 100.8])]
    assert fl.trend(flat, fl.bucket_names()).first_regression == {}


# ---------------------------------------------------------------------------
# CLI, HTML report, imports
# ---------------------------------------------------------------------------


@needs_dask
def test_cli_fleet(fleet_dir, sequential, tmp_path, monkeypatch, capsys):
    from profanalyzer.cli import main

    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    args = ["fleet", *fleet_dir["paths"], "--workers", "2", "--cache-dir", str(tmp_path / "c")]
    assert main([*args, "-o", str(out / "fleet.html"), "--json", str(out / "fleet.json")]) == 0
    doc = json.loads((out / "fleet.json").read_text())
    assert doc.pop("cache") == {"enabled": True, "hits": 0, "analysed": 15}
    ref = json.loads(json.dumps(sequential.to_dict()))
    ref.pop("cache")
    assert doc == ref
    text = capsys.readouterr().out
    assert f"stragglers: {fleet_dir['straggler']}" in text and "truncated or corrupt" in text
    page = (out / "fleet.html").read_text()
    assert fleet_dir["straggler"] in page and 'class="straggler-row"' in page and "<svg" in page
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c", "out"]  # no Dask scratch space in the cwd
    # an unchanged local fleet: every record from the cache, checked here, no cluster started
    monkeypatch.setattr(fl.execute, "analyse_dask", lambda files, *a, **k: pytest.fail(f"cluster started for {len(files)} files"))
    monkeypatch.setattr(fl.execute, "analyse_sequential", lambda files, *a, **k: [fl.analyse_host_file(f, use_cache=False) for f in files])
    assert main([*args, "--no-html", "--json", str(out / "again.json")]) == 0
    again = json.loads((out / "again.json").read_text())
    assert again.pop("cache") == {"enabled": True, "hits": 15, "analysed": 0}
    assert again == ref
    assert main(["fleet", *fleet_dir["paths"], "--workers", "2", "--scheduler", "tcp://127.0.0.1:1"]) == 2  # exclusive


def test_cli_fleet_sequential_json_stdout(fleet_dir, tmp_path, capsys):
    from profanalyzer.cli import main

    rc = main(["fleet", str(fleet_dir["nightly"]), "--workers", "0", "--no-html", "--json", "-", "--cache-dir", str(tmp_path / "c"), "--no-cache"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["run"] for r in doc["runs"]] == list(NIGHTLY_RUNS)
    assert doc["cache"] == {"enabled": False, "hits": 0, "analysed": 6}
    assert not (tmp_path / "c").exists()  # --no-cache: nothing read or written
    assert main(["fleet", fleet_dir["corrupt"], "--workers", "0", "--no-html", "-q", "--no-cache"]) == 2  # nothing analysed


def test_html_escapes_names_and_errors(fleet_dir, tmp_path):
    from profanalyzer.report.fleet_html import render_fleet_html

    run = tmp_path / "logs" / "plugins" / "profile" / "<i>run&'\""
    run.mkdir(parents=True)
    src = sorted(p for p in (fleet_dir["nightly"] / "n0").rglob("*.xplane.pb"))
    (run / '<img src=x onerror="alert(1)">.xplane.pb').write_bytes(src[0].read_bytes())
    (run / "<script>alert(2)<!--.xplane.pb").write_bytes(b"{ json, not a protobuf")
    r = fl.run_fleet([str(tmp_path / "logs")], workers=0, use_cache=False)
    assert r.files_ok == 1 and len(r.failures) == 1
    page = render_fleet_html(r, command_line="profanalyze fleet <x>")
    assert "<script>alert" not in page and "<img src=x" not in page and "<i>run" not in page
    assert "&lt;script&gt;alert(2)&lt;!--" in page and "&lt;i&gt;run&amp;" in page and "<!--" not in page
    assert render_fleet_html(r, command_line="profanalyze fleet <x>") == page  # deterministic


def test_fleet_report_sections(sequential):
    from profanalyzer.report.fleet_html import render_fleet_html

    page = render_fleet_html(sequential)
    for anchor in ('id="trend"', 'id="trend-table"', 'id="runs"', 'id="run-4"', 'id="failures"', 'id="failure-table"', 'id="first-regressions"'):
        assert anchor in page
    assert page.count('class="straggler-row"') == 1
    assert 'class="regressed"' in page  # marker in the trend chart


def test_single_trace_command_imports_neither_dask_nor_pandas(fleet_dir, tmp_path):
    # Dask is the fleet extra; pandas is no runtime dependency (its import
    # alone cost ~0.25 s of the end-to-end benchmark).
    host = sorted((fleet_dir["nightly"] / "n0").rglob("*.xplane.pb"))[0]
    code = (
        "import sys\n"
        "from profanalyzer.cli import main\n"
        f"rc = main(['analyze', {str(host)!r}, '-o', {str(tmp_path / 'r.html')!r}, '-q', '--json', {str(tmp_path / 'a.json')!r}, "
        f"'--markdown', {str(tmp_path / 'r.md')!r}])\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed', 'pandas'))\n"
        "print(rc, bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "0 []"
    assert json.loads((tmp_path / "a.json").read_text())["steps"]["kept"] >= 1
