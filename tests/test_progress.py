"""The progress bar of `profanalyze` / `profanalyze info` while host files
are read: on a TTY only, off with -q, redrawn in place, bytes and files."""

from __future__ import annotations

import io
import re
import sys

from conftest import SAMPLES, run_cli

from profanalyzer.cli.analyze import _progress

RUN = next((SAMPLES / "dense_short_fsdp_2hosts").glob("plugins/profile/*"))


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def _files():
    return sorted(RUN.glob("*.xplane.pb"))


def test_bar_counts_files_and_bytes(monkeypatch):
    tty = FakeTTY()
    monkeypatch.setattr(sys, "stderr", tty)
    report = _progress(False, str(RUN))
    files = _files()
    for k, f in enumerate(files):
        report(k + 1, len(files), f.name)
    out = tty.getvalue()
    draws = out.split("\r\x1b[K")[1:]
    assert len(draws) == len(files)
    assert out.endswith("\n") and out.count("\n") == 1  # redrawn in place, one newline at the end
    total = sum(f.stat().st_size for f in files)
    first = files[0].stat().st_size
    assert f"1/2 files, {first / 1e6:.1f} MB of {total / 1e6:.1f} MB" in draws[0]
    assert f"2/2 files, {total / 1e6:.1f} MB of {total / 1e6:.1f} MB" in draws[1]
    fills = [len(re.search(r"\[(#*)\.*\]", d).group(1)) for d in draws]
    assert 0 < fills[0] < fills[1] == 24
    assert re.search(r"\d+\.\d s: " + re.escape(files[1].name), draws[1])


def test_bar_without_sizes_counts_files(monkeypatch):
    tty = FakeTTY()
    monkeypatch.setattr(sys, "stderr", tty)
    report = _progress(False, None)
    report(1, 4, "h0.xplane.pb")
    assert "[######..................] 1/4 files, " in tty.getvalue()
    assert " MB" not in tty.getvalue()


def test_label_is_neutralised(monkeypatch):
    tty = FakeTTY()
    monkeypatch.setattr(sys, "stderr", tty)
    _progress(False, None)(1, 1, "\x1b[31mred\x07.xplane.pb")
    out = tty.getvalue()
    assert "\x1b[31m" not in out and "\x07" not in out and "?[31mred?.xplane.pb" in out


def test_off_when_quiet_or_not_a_tty(monkeypatch):
    monkeypatch.setattr(sys, "stderr", FakeTTY())
    assert _progress(True, str(RUN)) is None
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert _progress(False, str(RUN)) is None


def test_cli_draws_the_bar_on_a_tty_only(tmp_path, capsys, monkeypatch):
    out = tmp_path / "r.html"
    tty = FakeTTY()
    monkeypatch.setattr(sys, "stderr", tty)
    rc, _, _ = run_cli(capsys, RUN, "-o", out)
    assert rc == 0
    bar = tty.getvalue()
    assert "reading host files [" in bar and "2/2 files" in bar and " MB of " in bar
    # then the analysis stage, on a line of its own that is cleared before the output
    assert re.search(r"\n\r\x1b\[Kanalysing \d+ TensorCores, [\d,]+ events \.\.\.\r\x1b\[K", bar)
    tty2 = FakeTTY()
    monkeypatch.setattr(sys, "stderr", tty2)
    rc, _, _ = run_cli(capsys, RUN, "-o", out, "-q")
    assert rc == 0 and "reading host files" not in tty2.getvalue()
    monkeypatch.undo()
    rc, _, err = run_cli(capsys, RUN, "-o", out)  # captured stderr: not a TTY
    assert rc == 0 and "reading host files" not in err
