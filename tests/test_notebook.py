"""The notebook API: profanalyzer.load (every kind of source), the
DataFrames of Analysis.frames() checked against the records they come from,
the HTML cards (escaped), the example in examples/, and the command line
still never importing pandas."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest
from conftest import ROOT, SAMPLES, analysis_of, findings_of, sample_doc, sample_path

pd = pytest.importorskip("pandas", reason="the notebook API needs pandas")

import profanalyzer  # noqa: E402
from profanalyzer.core.errors import InputError  # noqa: E402
from profanalyzer.model.analysis import Analysis  # noqa: E402
from profanalyzer.model.frames import FRAME_COLUMNS  # noqa: E402


def _doc(x) -> dict:
    d = x.to_dict()
    d.pop("source")
    return d


def test_load_every_kind_of_source_gives_the_same_document(tmp_path):
    path = sample_path("offload_off")
    want = sample_doc("offload_off")
    want.pop("source")
    a = profanalyzer.load(path)
    assert isinstance(a, Analysis) and a.findings is not None
    assert _doc(a) == want
    assert _doc(profanalyzer.load(str(path))) == want
    assert _doc(profanalyzer.load(path.read_bytes())) == want  # gzipped bytes
    assert _doc(profanalyzer.load(gzip.decompress(path.read_bytes()))) == want  # raw bytes
    assert profanalyzer.load(path.read_bytes()).source == "<bytes>"
    assert _doc(profanalyzer.load(path.resolve().as_uri())) == want  # a URL
    saved = tmp_path / "a.json"
    saved.write_text(json.dumps(sample_doc("offload_off")))
    assert _doc(profanalyzer.load(saved)) == want  # a saved document
    assert _doc(profanalyzer.load(saved.read_bytes())) == want
    assert _doc(profanalyzer.load(gzip.compress(saved.read_bytes()))) == want
    run = profanalyzer.load(SAMPLES / "dense_short_fsdp_2hosts")  # a log dir
    assert run.run and len(run.hosts) == 2
    sel = profanalyzer.load(path, select=["SC"])
    assert {f.code[:2] for f in sel.findings.recommendations} <= {"SC"}


def test_load_bad_input_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        profanalyzer.load(tmp_path / "gone.xplane.pb")
    with pytest.raises(InputError):
        profanalyzer.load(b"{not json")
    with pytest.raises(InputError):
        profanalyzer.load(b"\x1f\x8b broken")
    with pytest.raises(InputError, match="not int"):
        profanalyzer.load(3)


@pytest.mark.parametrize("name", ["offload_off", "moe_short_fsdp_ep", "straggler_core"])
def test_frames_hold_what_the_records_hold(name):
    a, f = analysis_of(name), findings_of(name)
    fr = a.frames(f)
    assert set(fr) == set(FRAME_COLUMNS)
    for k, df in fr.items():
        assert tuple(df.columns) == FRAME_COLUMNS[k], k
    steps = fr["steps"]
    assert len(steps) == len(a.steps.table) and int(steps.kept.sum()) == a.steps.kept
    assert (steps[~steps.kept].reason != "").all()
    b = fr["buckets"]
    run = b[b.scope == "run"].set_index("bucket")
    assert run.fraction.sum() == pytest.approx(1.0, abs=1e-3)
    for bucket, share in a.breakdown.items():
        assert run.loc[bucket, "ps"] == share.ps
    per_core = b[b.scope == "core"].groupby("core").fraction.sum()
    assert len(per_core) == len(a.per_core) and (per_core - 1).abs().max() < 1e-3
    per_step = b[b.scope == "step"].groupby("step").ps.sum()
    for r in a.steps.table:
        assert per_step[r.number] == pytest.approx(r.step_ps, rel=1e-3, abs=1.0)
    ops = fr["ops"]
    for table in ("top_ops", "remat_ops", "kernel_ops"):
        rows = ops[ops.table == table]
        assert len(rows) == len(getattr(a, table))
        assert rows.self_ps.sum() == pytest.approx(sum(o.self_ps for o in getattr(a, table)))
    w = fr["windows"]
    assert (w.exposed_ps + w.hidden_ps == w.window_ps).all()
    assert (w.end_ps >= w.start_ps).all()
    assert len(w[w.source == "top_exposed"]) == len(a.communication.top_exposed)
    assert len(w[w.source == "timeline"]) == (len(a.timeline.windows) if a.timeline else 0)
    fd = fr["findings"]
    assert list(fd.code) == [x.code for x in f.recommendations]
    assert list(fd["rank"]) == list(range(1, len(f.recommendations) + 1))
    assert a.frames()["findings"].empty  # no findings given: the frame keeps its columns
    assert tuple(a.frames()["findings"].columns) == FRAME_COLUMNS["findings"]


def test_step_by_core_frames_of_a_loaded_trace():
    """profanalyzer.load of a trace keeps each TensorCore's time per step:
    the steps frame is step x core, and its medians are the steps table."""
    a = profanalyzer.load(sample_path("straggler_core"))
    plain = analysis_of("straggler_core")
    fr = a.frames()
    steps = fr["steps"]
    assert set(steps.core) == {c.core for c in plain.per_core}
    assert len(steps) == len(a.core_steps) == len(plain.steps.table) * plain.tensorcores
    med = steps.groupby("step").step_ps.median()
    for r in plain.steps.table:
        assert med[r.number] == pytest.approx(r.step_ps)
        assert (steps[steps.step == r.number].kept == r.kept).all()
    b = fr["buckets"]
    sc = b[b.scope == "step_core"]
    sums = {(int(k[0]), k[1]): v for k, v in sc.groupby(["step", "core"]).ps.sum().items()}
    per = {(int(r.step), r.core): r.step_ps for r in steps.itertuples()}
    assert sums == per  # integer ps: each core's buckets sum to its step exactly
    # the 'step' scope is the mean over cores of 'step_core'
    mean = {(int(k[0]), k[1]): v for k, v in sc.groupby(["step", "bucket"]).ps.mean().items()}
    st = {(int(r.step), r.bucket): r.ps for r in b[b.scope == "step"].itertuples()}
    assert mean.keys() == st.keys() and max(abs(mean[k] - st[k]) for k in st) < 1.0
    # each core's mean over the kept steps is the per-core summary
    kept = steps[steps.kept].groupby("core").step_ps.mean()
    for c in plain.per_core:
        assert kept[c.core] == pytest.approx(c.step_ps, rel=1e-9)
    # a saved document has no per-core step times: one median row per step
    saved = profanalyzer.load(json.dumps(sample_doc("straggler_core")).encode())
    assert saved.core_steps == () and list(saved.frames()["steps"].core.unique()) == ["median"]


def test_cards_are_escaped():
    from profanalyzer.report.registry import FINDING_RENDERERS

    a = profanalyzer.load(sample_path("xss_names"))
    page = a._repr_html_() + "".join(FINDING_RENDERERS["card"].render(f) for f in a.findings.recommendations)
    assert "<script" not in page.lower()
    assert "profanalyze" in page and a.steps.kept > 0
    card = FINDING_RENDERERS["card"].render(findings_of("offload_off").recommendations[0])
    assert findings_of("offload_off").recommendations[0].code in card


class _FakeHtmlFormatter:
    """IPython's text/html formatter as far as show_cards uses it (IPython is not a test dependency)."""

    def __init__(self) -> None:
        self.by_name: dict[tuple[str, str], object] = {}

    def for_type_by_name(self, module: str, name: str, func) -> None:
        self.by_name[(module, name)] = func

    def __call__(self, obj):
        """IPython's lookup: the printer of the object's class or of a base class (by module and name)."""
        for cls in type(obj).__mro__:
            func = self.by_name.get((cls.__module__, cls.__name__))
            if func is not None:
                return func(obj)
        return None


def test_jupyter_shows_every_analysis_and_finding_as_its_card_through_the_registry():
    """The cards are renderers of report/registry.py; `profanalyzer.show_cards` registers them with IPython's
    HTML display for the record types (the records themselves import no renderer)."""
    from types import SimpleNamespace

    from profanalyzer.model.analysis import Analysis
    from profanalyzer.model.findings import Finding
    from profanalyzer.report.registry import FINDING_RENDERERS, NOTEBOOK_RENDERERS

    assert not hasattr(Analysis, "_repr_html_") and not hasattr(Finding, "_repr_html_")
    assert profanalyzer.show_cards() is False  # no IPython running here
    html = _FakeHtmlFormatter()
    assert profanalyzer.show_cards(SimpleNamespace(display_formatter=SimpleNamespace(formatters={"text/html": html})))
    plain, f = analysis_of("offload_off"), findings_of("offload_off").recommendations[0]
    shown = html(plain)
    assert shown == NOTEBOOK_RENDERERS["card"].render(SimpleNamespace(analysis=plain, findings=None))
    assert "Step time" in shown and "<table" in shown and "Recommendations" not in shown
    assert html(f) == FINDING_RENDERERS["card"].render(f) and f.code in html(f)
    loaded = profanalyzer.load(sample_path("offload_off"))  # a LoadedAnalysis: its card lists its findings
    assert html(loaded) == loaded._repr_html_() and f.code in html(loaded) and "Recommendations" in html(loaded)


def test_the_notebook_example_runs():
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "notebook.py"), str(sample_path("offload_off"))],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    codes = [x.code for x in findings_of("offload_off").recommendations]
    assert all(c in out.stdout for c in codes)


def test_commands_import_neither_pandas_nor_dask_nor_fsspec(tmp_path):
    """The notebook API and URLs are the only users of pandas and fsspec:
    the commands on local paths load neither (nor Dask)."""
    trace = sample_path("offload_off")
    calls = [
        ["analyze", str(trace), "-o", str(tmp_path / "r.html"), "-q", "--json", str(tmp_path / "a.json")],
        ["info", str(trace)],
        ["compare", str(trace), str(tmp_path / "a.json"), "-q"],
        ["explain", "SC001"],
        ["schema", "-o", str(tmp_path / "s.json")],
    ]
    code = (
        "import sys\n"
        "from profanalyzer.cli import main\n"
        f"rcs = [main(c) for c in {calls!r}]\n"
        "bad = sorted({m.split('.')[0] for m in sys.modules if m.split('.')[0] in ('dask', 'distributed', 'pandas', 'fsspec', 'gcsfs')})\n"
        "print(rcs, bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[0, 0, 0, 0, 0] []"


def test_analyze_imports_no_start_up_weight(tmp_path):
    """The default command computes its medians without numpy.ma (10 ms of start-up on np.median's first
    call) or the statistics module (decimal, fractions, random): `core.stats` does. dense_short_fsdp's
    planes carry their peaks, so the device-peak medians run."""
    trace = sample_path("dense_short_fsdp")
    code = (
        "import sys\n"
        "from profanalyzer.cli import main\n"
        f"rc = main(['analyze', {str(trace)!r}, '-o', {str(tmp_path / 'r.html')!r}, '-q'])\n"
        "print(rc, sorted(m for m in ('numpy.ma', 'statistics') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "0 []"


def test_importing_profanalyzer_in_a_running_ipython_registers_the_cards():
    """`import profanalyzer` with IPython running (here a stand-in module) registers both card printers; without
    IPython it imports nothing of the display."""
    code = (
        "import sys, types\n"
        "seen = []\n"
        "fmt = types.SimpleNamespace(for_type_by_name=lambda m, n, f: seen.append((m, n)))\n"
        "ip = types.SimpleNamespace(display_formatter=types.SimpleNamespace(formatters={'text/html': fmt}))\n"
        "sys.modules['IPython'] = types.SimpleNamespace(get_ipython=lambda: ip)\n"
        "import profanalyzer\n"
        "print(sorted(seen), 'profanalyzer.report.registry' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ("[('profanalyzer.model.analysis', 'Analysis'), ('profanalyzer.model.findings', "
                                  "'Finding')] False")
    plain = subprocess.run([sys.executable, "-c", "import sys, profanalyzer; print('profanalyzer.api.cards' in sys.modules)"],
                           capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert plain.stdout.strip() == "False"
