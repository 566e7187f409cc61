"""The vectorised / compiled event decoders agree with the protobuf runtime."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
from conftest import sample_path

from profanalyzer.read.xspace import wire, xplane_pb2
from profanalyzer.synth.pbenc import f_bytes, f_varint

SAMPLES = ["dense_short_fsdp", "moe_large_pp", "xss_names", "zero_timestamps"]


def _reference(line):
    mid = [e.metadata_id for e in line.events]
    off = [e.offset_ps for e in line.events]
    dur = [e.duration_ps for e in line.events]
    stats = []
    for i, e in enumerate(line.events):
        for s in e.stats:
            which = s.WhichOneof("value")
            if which in ("int64_value", "uint64_value", "ref_value"):
                v = getattr(s, which)
                stats.append((i, s.metadata_id, v - (1 << 64) if v >= 1 << 63 else v, which == "ref_value"))
            elif which == "double_value":
                stats.append((i, s.metadata_id, int(s.double_value), False))
    return mid, off, dur, sorted(stats)


def _got(ev):
    st = sorted(zip(ev.stat_event.tolist(), ev.stat_id.tolist(), ev.stat_value.tolist(), [bool(x) for x in ev.stat_is_ref], strict=True))
    return ev.metadata_id.tolist(), ev.offset_ps.tolist(), ev.duration_ps.tolist(), st


def _lines(name):
    data = gzip.decompress(sample_path(name).read_bytes())
    sp = xplane_pb2.XSpace.FromString(data)
    for p in sp.planes:
        if p.name.startswith("/device:TPU:0"):
            for ln in p.lines:
                if len(ln.events):
                    yield p.name, ln, ln.SerializeToString()


@pytest.mark.parametrize("name", SAMPLES)
def test_decoders_match_protobuf_runtime(name):
    checked_numpy = 0
    for plane, ln, raw in _lines(name):
        ref = _reference(ln)
        got = wire.decode_line(raw, 0, len(raw))
        assert got is not None, f"{plane} {ln.name}: fast path refused a well-formed line"
        head, ev = got
        assert head.name == ln.name and head.timestamp_ns == ln.timestamp_ns
        assert _got(ev) == ref, f"{plane} {ln.name}"
        # The numpy decoder: same result, or None on lines with raw-byte stats.
        run = _first_event_run(raw)
        np_got = wire.decode_event_run_numpy(raw, run, len(raw))
        has_strings = any(s.WhichOneof("value") in ("str_value", "bytes_value", "double_value") for e in ln.events for s in e.stats)
        if np_got is None:
            assert has_strings, f"{plane} {ln.name}: numpy decoder refused a line without raw-byte stats"
        else:
            assert _got(np_got[0]) == ref
            checked_numpy += 1
    assert checked_numpy > 0


@pytest.mark.parametrize("name", ["dense_short_fsdp", "offload_on"])
def test_stat_filter_keeps_exactly_the_wanted_ids_in_both_decoders(name):
    checked = 0
    for plane, ln, raw in _lines(name):
        ref = _reference(ln)
        ids = sorted({s[1] for s in ref[3]})
        if len(ids) < 2:
            continue
        want = ids[::2]  # every other stat id present on the line
        expect = (*ref[:3], [s for s in ref[3] if s[1] in want])
        run = _first_event_run(raw)
        for fn in (wire.decode_event_run, wire.decode_event_run_numpy):
            got = fn(raw, run, len(raw), want=want)
            if got is None:  # numpy refuses lines with raw-byte stats (tested above)
                continue
            assert _got(got[0]) == expect, f"{plane} {ln.name} {fn.__name__}"
            checked += 1
        assert _got(wire.decode_line(raw, 0, len(raw), want=[])[1])[3] == []
    assert checked > 0


def _first_event_run(raw: bytes) -> int:
    for field, wt, _, _ps, _pe, tag_pos in wire.iter_fields(raw, 0, len(raw)):
        if field == 4 and wt == 2:
            return tag_pos
    raise AssertionError("no events")


@pytest.mark.parametrize("decoder", ["accel", "numpy"])
def test_malformed_bytes_are_refused_not_raised(decoder):
    fn = wire.decode_event_run if decoder == "accel" else wire.decode_event_run_numpy
    rng = np.random.default_rng(0)
    base = next(_lines("xss_names"))[2]
    start = _first_event_run(base)
    for _ in range(300):
        b = bytearray(base)
        for _ in range(3):
            b[int(rng.integers(start, len(b)))] = int(rng.integers(0, 256))
        cut = int(rng.integers(start, len(b) + 1))
        out = fn(bytes(b[:cut]), start, cut)
        assert out is None or len(out[0].metadata_id) >= 0


def test_accelerator_is_built_here():
    # make test installs the package with its optional C decoder; where no
    # compiler exists the numpy path is used (tested above) and this is skipped.
    if wire._accel is None:
        pytest.skip("C accelerator not built (no compiler at install time)")
    assert wire._accel.decode_event_run(b"", 0, 0) is None


def _line_bytes(*fields: tuple[int, object]) -> bytes:
    return b"".join(f_varint(num, val) if isinstance(val, int) else f_bytes(num, val) for num, val in fields)


def test_peek_line_reads_the_header_before_the_events_only():
    ev = _line_bytes((1, 7), (2, 100), (3, 5000))  # an XEvent: metadata_id, offset, duration
    assert wire.peek_line(*_span(_line_bytes((1, 3), (2, "XLA Ops"), (3, 123), (4, ev), (4, ev)))) == ("XLA Ops", 123, True)
    # No name before the events: display_name may follow them, so undecided.
    assert wire.peek_line(*_span(_line_bytes((1, 3), (3, 9), (4, ev), (11, "Steps")))) is None
    # No events at all: every field was seen.
    assert wire.peek_line(*_span(_line_bytes((1, 3), (11, "Steps"), (3, 9)))) == ("Steps", 9, False)
    assert wire.peek_line(*_span(b"\x12\x50abc")) is None  # a name that runs past the end


def _span(b: bytes) -> tuple[bytes, int, int]:
    return b, 0, len(b)


@pytest.mark.parametrize("name", ["offload_on", "moe_large_pp", "zero_timestamps"])
def test_skipping_lines_the_analysis_does_not_read_changes_nothing(name):
    # run_analysis() decodes ANALYSIS_LINES only (Sparse Core Syncs, XLA TraceMe, ...
    # are skipped unread); the result equals the analysis of every line.
    from profanalyzer.analyze.analysis import analyze_trace
    from profanalyzer.model.trace import ANALYSIS_LINES
    from profanalyzer.pipeline.run import run_analysis
    from profanalyzer.read.xspace.build import load_trace

    full = load_trace(sample_path(name))
    part = load_trace(sample_path(name), lines=ANALYSIS_LINES)
    skipped = {ln.name for p in full.tensorcores + full.sparsecores for ln in p.lines} - ANALYSIS_LINES
    assert skipped, "the sample has no line the analysis skips"
    assert not {ln.name for p in part.tensorcores + part.sparsecores for ln in p.lines} & skipped
    assert part.origin_ns == full.origin_ns
    assert run_analysis(sample_path(name)).to_dict() == analyze_trace(full).to_dict()


def _scatter(ev: wire.RawEvents, want) -> dict[int, list[int]]:
    """The per-event column of each wanted stat id from the stat columns (what
    xspace.events made of them before `dense`): the last value of an
    event wins, refs are not values, -1 where an event has none."""
    out = {}
    for sid in want:
        m = (ev.stat_id == sid) & ~ev.stat_is_ref
        if m.any():
            col = np.full(len(ev), -1, dtype=np.int64)
            col[ev.stat_event[m]] = ev.stat_value[m]
            out[sid] = col.tolist()
    return out


def _event(mid: int, stats: list[bytes]) -> bytes:
    return f_bytes(4, f_varint(1, mid) + f_varint(2, mid * 10) + f_varint(3, 5) + b"".join(f_bytes(4, s) for s in stats))


def _stat(sid: int, value: int, field: int = 4) -> bytes:
    return f_varint(1, sid) + f_varint(field, value)


@pytest.mark.skipif(wire._accel is None, reason="C accelerator not built (no compiler at install)")
def test_dense_stat_columns_equal_the_scattered_stats():
    cases = [(name, raw) for name in ("dense_short_fsdp", "offload_on", "moe_large_pp") for _, _, raw in _lines(name)]
    # Hand-made: a stat twice in one event (the last wins), a ref of a wanted id
    # (not a value; an earlier value stays), an id on one event only, an
    # unwanted id, an event with no stats, a stat without a value.
    line = (_event(1, [_stat(7, 3), _stat(7, 4)]) + _event(2, [_stat(7, 9), _stat(7, 2, field=7)]) + _event(3, [])
            + _event(4, [_stat(8, 1), _stat(9, 6)]) + _event(5, [_stat(8, 1 << 63, field=3)]) + _event(6, [f_varint(1, 8)]))
    cases.append(("hand-made", f_varint(1, 1) + line))
    checked = 0
    for name, raw in cases:
        run = _first_event_run(raw)
        full = wire.decode_event_run(raw, run, len(raw))
        assert full is not None, name
        ids = sorted(set(full[0].stat_id.tolist())) + [12345]  # plus an id no event has
        for want in (ids, ids[::2], []):
            got = wire.decode_event_run(raw, run, len(raw), want=want, dense=True)
            assert got is not None and got[1] == full[1], name
            ev = got[0]
            assert len(ev.stat_id) == 0 and ev.dense is not None
            assert {k: v.tolist() for k, v in ev.dense.items()} == _scatter(full[0], want), (name, want)
            assert all(v.flags.writeable for v in ev.dense.values())
            checked += 1
    assert checked > 10
    hand = wire.decode_event_run(cases[-1][1], _first_event_run(cases[-1][1]), len(cases[-1][1]), want=[7, 8, 9], dense=True)[0]
    assert hand.dense[7].tolist() == [4, 9, -1, -1, -1, -1]
    assert hand.dense[8].tolist() == [-1, -1, -1, 1, -(1 << 63), -1]
    assert hand.dense[9].tolist() == [-1, -1, -1, 6, -1, -1]


@pytest.mark.skipif(wire._accel is None, reason="C accelerator not built (no compiler at install)")
def test_dense_columns_of_a_line_whose_events_come_in_several_runs():
    """Events split by another line field (legal protobuf): the columns of
    the runs are joined, -1 on a run that lacks a stat."""
    raw = (f_varint(1, 1) + _event(1, [_stat(7, 3)]) + f_bytes(2, b"XLA Ops") + _event(2, [_stat(8, 5)]) + _event(3, []))
    head, ev = wire.decode_line(raw, 0, len(raw), want=[7, 8], dense=True)
    assert head.name == "XLA Ops" and len(ev) == 3
    assert ev.dense[7].tolist() == [3, -1, -1] and ev.dense[8].tolist() == [-1, 5, -1]
