"""Regenerate reports/<name>.report.html and reports/<name>.report.md for every
sample trace in sample_traces/ (`make reports`).

Deterministic: no timestamp, the command line is the canonical
`profanalyze sample_traces/<file>` and the input hash is the file's SHA-256,
so a test can re-render and compare (tests/test_report_html.py fails when
reports/ is stale).

    python tools/make_reports.py            # rewrite reports/
    python tools/make_reports.py --check    # exit 1 when reports/ is stale
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_traces"
REPORTS = ROOT / "reports"
SUFFIXES = (".xplane.pb.gz", ".xplane.pb")


def sample_traces(folder: Path = SAMPLES) -> dict[str, Path]:
    """name -> trace path, for every trace file (or run folder) in sample_traces/."""
    out: dict[str, Path] = {}
    if not folder.is_dir():
        return out
    for p in sorted(folder.iterdir()):
        if p.is_file():
            for s in SUFFIXES:
                if p.name.endswith(s):
                    out.setdefault(p.name[: -len(s)], p)
        elif p.is_dir() and any(p.rglob("*.xplane.pb*")):
            out.setdefault(p.name, p)
    return out


def command_line_for(path: Path) -> str:
    try:
        rel = path.resolve().relative_to(ROOT)
    except ValueError:
        rel = path
    return f"profanalyze {rel.as_posix()}"


def render_sample(path: Path, analysis=None, findings=None) -> tuple[str, str]:
    """(html, markdown) of one sample trace, exactly as reports/ holds them: the run of `profanalyze`
    (pipeline.run, the rules' needs included), or the given analysis and findings."""
    import dataclasses
    import os

    from profanalyzer.core.outputs import file_sha256
    from profanalyzer.pipeline.run import Run, run
    from profanalyzer.report.registry import RENDERERS, RenderOptions

    r = run(path) if analysis is None else Run(analysis, findings)
    # Reports name their trace relative to the repository, so they do not
    # depend on where the checkout lives.
    src = Path(r.analysis.source)
    if src.is_absolute():
        r = Run(dataclasses.replace(r.analysis, source=os.path.relpath(src, ROOT)), r.findings)
    html = RENDERERS["html"].render(r, RenderOptions(command_line=command_line_for(path), input_sha256=file_sha256(path)))
    return html, RENDERERS["markdown"].render(r)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="Do not write; exit 1 when any report differs.")
    ap.add_argument("--samples", type=Path, default=SAMPLES)
    ap.add_argument("--out", type=Path, default=REPORTS)
    args = ap.parse_args(argv)
    traces = sample_traces(args.samples)
    if not traces:
        print(f"no sample traces in {args.samples}", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    stale = []
    for name, path in traces.items():
        t0 = time.perf_counter()
        html, md = render_sample(path)
        dt = time.perf_counter() - t0
        for suffix, text in ((".report.html", html), (".report.md", md)):
            dest = args.out / f"{name}{suffix}"
            old = dest.read_text(encoding="utf-8") if dest.exists() else None
            if old != text:
                stale.append(dest)
                if not args.check:
                    dest.write_text(text, encoding="utf-8")
        print(f"{name}: {len(html.encode()) / 1024:.0f} KiB html, {len(md.encode()) / 1024:.1f} KiB md, {dt:.2f} s")
    known = {f"{n}{s}" for n in traces for s in (".report.html", ".report.md")}
    orphans = [p for p in sorted(args.out.glob("*.report.*")) if p.name not in known]
    for p in orphans:
        if args.check:
            stale.append(p)
        else:
            p.unlink()
    if args.check and stale:
        print("stale: " + ", ".join(str(p) for p in stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
