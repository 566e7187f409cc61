"""Run folders: host files decoded on a shared pool of threads give what the
one-file-at-a-time path gives, report progress and errors in file order."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from conftest import SAMPLES
from xsb import SpaceBuilder

from profanalyzer.core.errors import InputError
from profanalyzer.findings.engine import run_rules
from profanalyzer.model.documents import result_document
from profanalyzer.pipeline.run import RunOptions, run_analysis
from profanalyzer.read.xspace.build import load_trace

EPOCH_NS = 1_732_000_000_000_000_000
RUN = next((SAMPLES / "dense_short_fsdp_2hosts").glob("plugins/profile/*"))


def _doc(path, jobs: int) -> str:
    a = run_analysis(path, RunOptions(jobs=jobs))
    return json.dumps(result_document(a, run_rules(a)), sort_keys=True)


def test_parallel_and_sequential_reads_agree(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    for k in range(3):  # three hosts: more files than decode slots
        for f in sorted(RUN.glob("*.xplane.pb")):
            shutil.copyfile(f, run / f"{k}-{f.name}")
    seq, par = load_trace(run, jobs=1), load_trace(run, jobs=2)
    assert [h.file for h in par.hosts] == [h.file for h in seq.hosts]
    assert par.origin_ns == seq.origin_ns
    assert [p.label for p in par.planes] == [p.label for p in seq.planes]
    for a, b in zip(par.planes, seq.planes, strict=True):
        assert [ln.name for ln in a.lines] == [ln.name for ln in b.lines]
        for la, lb in zip(a.lines, b.lines, strict=True):
            assert np.array_equal(la.events.start_ps, lb.events.start_ps)
            assert np.array_equal(la.events.end_ps, lb.events.end_ps)
            assert np.array_equal(la.events.meta, lb.events.meta)
    assert _doc(RUN, 2) == _doc(RUN, 1)


def test_progress_in_file_order():
    calls = []
    load_trace(RUN, jobs=2, progress=lambda *a: calls.append(a))
    names = sorted(f.name for f in RUN.glob("*.xplane.pb"))
    assert calls == [(k + 1, len(names), n) for k, n in enumerate(names)]


def _bad_timestamps() -> bytes:
    """Opens fine; its TensorCore plane fails while decoding (mixed-clock lines)."""
    sp = SpaceBuilder("h0")
    tc = sp.plane("/device:TPU:0", device_type="TPU v7x")
    tc.line("Steps", timestamp_ns=1 << 62).event("0", 0, 1_000_000, stats={"group_id": 0})
    tc.line("XLA Ops", timestamp_ns=0).event("%fusion.1 = bf16[8]{0} fusion(bf16[8] %a), kind=kLoop", 0, 5, display="fusion.1")
    return sp.bytes()


@pytest.mark.parametrize("first_bad", ["decode", "open"])
def test_errors_come_in_file_order(tmp_path, first_bad):
    """The first file's error is reported, whether it shows while decoding
    (on a thread) or while opening (the next file is opened meanwhile)."""
    run = tmp_path / "run"
    run.mkdir()
    decode_err, open_err = _bad_timestamps(), b'{"traceEvents": []}'
    a, b = (decode_err, open_err) if first_bad == "decode" else (open_err, decode_err)
    (run / "a.xplane.pb").write_bytes(a)
    (run / "b.xplane.pb").write_bytes(b)
    with pytest.raises(InputError) as e:
        load_trace(run, jobs=2)
    msg = str(e.value)
    assert "a.xplane.pb" in msg and "b.xplane.pb" not in msg
    assert ("mixed-clock" in msg) == (first_bad == "decode")
    assert ("this is JSON" in msg) == (first_bad == "open")
