"""The plane op-metadata table: the C decoder (`wire.decode_metadata` +
`optable.metadata_from_columns`) against the protobuf runtime's
(`optable.metadata_from_message`) on every sample, the real captures and
hand-made edge cases, and the per-host sharing of identical maps."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from profanalyzer.core.errors import InputError
from profanalyzer.read.xspace import build as tb
from profanalyzer.read.xspace import capturefile, optable, reader, wire
from profanalyzer.read.xspace import xplane_pb2 as pb

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted((ROOT / "sample_traces").glob("*.xplane.pb.gz"))
REAL = sorted((ROOT.parent / "shared" / "real-traces").glob("*.xplane.pb*"))

needs_accel = pytest.mark.skipif(wire._accel is None, reason="C accelerator not built (no compiler at install)")

FIELDS = ("name", "display_name", "category", "tf_op", "deduplicated_name", "source", "shape_with_layout")
ARRAYS = ("ids", "program_id", "symbol_id", "flops", "model_flops", "bytes_accessed", "raw_bytes_accessed")


def assert_same(a, b) -> None:
    for f in FIELDS:
        assert getattr(a, f) == getattr(b, f), f
    for f in ARRAYS:
        x, y = getattr(a, f), getattr(b, f)
        assert x.dtype == y.dtype, f
        np.testing.assert_array_equal(x, y, err_msg=f)  # NaNs compare equal here


def both_ways(buf, start: int, end: int):
    """(C-decoded table, runtime-decoded table) of one plane's bytes."""
    fld, wt, ps, pe, tp = wire.scan_fields(buf, start, end)
    non_line = ~((fld == 3) & (wt == 2))
    is_meta = (fld == 4) & (wt == 2)
    plane = pb.XPlane.FromString(b"".join(bytes(buf[a:b]) for a, b in zip(tp[non_line], pe[non_line], strict=True)))
    names = {k: v.name for k, v in plane.stat_metadata.items()}
    cols = wire.decode_metadata(buf, np.stack([ps[is_meta], pe[is_meta]], axis=1))
    assert cols is not None
    return optable.metadata_from_columns(buf, cols, names), optable.metadata_from_message(plane, names)


@needs_accel
@pytest.mark.parametrize("path", SAMPLES + (REAL or [pytest.param(None, marks=pytest.mark.skip(
    reason="../shared/real-traces/ not present"))]), ids=lambda p: p.name if p else "real")
def test_c_metadata_equals_runtime(path):
    buf = capturefile.read_bytes(path)
    index = reader.scan_space(buf, path)
    planes = [r for r in index.planes if r.kind in ("tensorcore", "sparsecore")]
    assert planes
    for r in planes:
        fast, ref = both_ways(buf, r.offset, r.offset + r.length)
        assert len(ref) > 0
        assert_same(fast, ref)


def _edge_plane() -> bytes:
    p = pb.XPlane(id=1, name="/device:TPU:0")
    for sid, nm in ((1, "hlo_category"), (2, "flops"), (3, "tf_op"), (4, "program_id"), (5, "bytes_accessed"),
                    (6, "loop fusion"), (7, "source"), (8, "flops"), (9, "model_flops"), (10, "symbol_id"),
                    (11, "shape_with_layout"), (12, "raw_bytes_accessed")):
        p.stat_metadata[sid].id = sid
        p.stat_metadata[sid].name = nm
    md = p.event_metadata
    md[5].name = "%fusion.5 = bf16[8]{0} fusion(bf16[8]{0} %p)"
    md[5].display_name = "fusion.5"
    md[5].stats.add(metadata_id=1, ref_value=6)  # category by reference
    md[5].stats.add(metadata_id=2, uint64_value=(1 << 64) - 1)  # huge uint64
    md[5].stats.add(metadata_id=8, double_value=3.5)  # a second id named flops: last one wins
    md[5].stats.add(metadata_id=3, bytes_value=b"jit(f)/\xff/dot")  # bytes: replaced characters
    md[5].stats.add(metadata_id=4, uint64_value=(1 << 63) + 7)  # program id beyond int64
    md[5].stats.add(metadata_id=5, str_value="1234")  # a number written as text
    md[5].stats.add(metadata_id=9, str_value="not a number")
    md[5].stats.add(metadata_id=10, int64_value=-3)  # negative: missing
    md[5].stats.add(metadata_id=7)  # no value at all
    md[5].stats.add(metadata_id=99, str_value="unknown stat id")
    md[5].stats.add(metadata_id=11, double_value=2.0)  # a string stat holding a number: ""
    md[5].stats.add(metadata_id=12, ref_value=(1 << 63) + 1)  # a reference past int64
    md[2].name = "%x"  # no display name, no stats
    md[-4].display_name = "negative key"
    md[3].stats.add(metadata_id=1, str_value="convolution fusion")
    md[3].stats.add(metadata_id=1, int64_value=5)  # the last value of a name wins, even a non-string
    md[3].stats.add(metadata_id=2, double_value=float("nan"))
    md[3].stats.add(metadata_id=5, double_value=0.25)
    data = p.SerializeToString()
    # The same key again later in the map: the later entry replaces the earlier.
    again = pb.XPlane()
    again.event_metadata[2].name = "%x.replaced"
    again.event_metadata[2].stats.add(metadata_id=2, int64_value=10)
    return data + again.SerializeToString()


@needs_accel
def test_edge_cases_equal_runtime():
    data = _edge_plane()
    fast, ref = both_ways(data, 0, len(data))
    assert_same(fast, ref)
    row = list(ref.ids).index(5)
    assert ref.category[row] == "loop fusion" and ref.flops[row] == 3.5 and ref.program_id[row] == -2
    assert list(ref.ids).index(2) >= 0 and ref.name[list(ref.ids).index(2)] == "%x.replaced"


@needs_accel
def test_invalid_utf8_falls_back_to_the_runtime_error():
    p = pb.XPlane(id=1, name="/device:TPU:0")
    p.event_metadata[1].name = "ok"
    good = p.SerializeToString()
    bad = good.replace(b"ok", b"o\xff")
    fld, wt, ps, pe, _ = wire.scan_fields(bad, 0, len(bad))
    m = fld == 4
    assert wire.decode_metadata(bad, np.stack([ps[m], pe[m]], axis=1)) is None
    with pytest.raises(InputError, match="corrupt"):
        tb.build_plane(bad, 0, len(bad), "h", "tensorcore", 0, None)


def test_scan_fields_matches_iter_fields():
    data = _edge_plane()
    got = wire.scan_fields(data, 0, len(data))
    want = [(f, w, ps, pe, tp) for f, w, _, ps, pe, tp in wire.iter_fields(data, 0, len(data))]
    assert [tuple(int(c[i]) for c in got) for i in range(len(want))] == want
    with pytest.raises(ValueError):
        wire.scan_fields(data[:-1], 0, len(data) - 1)


def test_identical_maps_are_decoded_once_per_host():
    """A host's TensorCores share one table; a different map gets its own."""
    path = ROOT / "sample_traces" / "dense_short_fsdp.xplane.pb.gz"
    buf = capturefile.read_bytes(path)
    index = reader.scan_space(buf, path)
    tcs = [r for r in index.planes if r.kind == "tensorcore"]
    assert len(tcs) >= 2
    cache = optable.MetadataCache()
    built = [tb.build_plane(buf, r.offset, r.offset + r.length, "h", r.kind, 0, None, meta_cache=cache)[0] for r in tcs]
    assert all(p.meta is built[0].meta for p in built[1:])
    alone = tb.build_plane(buf, tcs[0].offset, tcs[0].offset + tcs[0].length, "h", "tensorcore", 0, None)[0]
    assert alone.meta is not built[0].meta
    assert_same(alone.meta, built[0].meta)
    other = _edge_plane()
    assert tb.build_plane(other, 0, len(other), "h", "tensorcore", 0, None, meta_cache=cache)[0].meta is not built[0].meta


def test_cache_waits_for_a_build_in_flight():
    cache = optable.MetadataCache()
    started, release = threading.Event(), threading.Event()
    calls = []

    def slow():
        calls.append(1)
        started.set()
        release.wait(5)
        return "table"

    out = []
    t1 = threading.Thread(target=lambda: out.append(cache.get(("k",), b"map", slow, b"map")))
    t1.start()
    started.wait(5)
    t2 = threading.Thread(target=lambda: out.append(cache.get(("k",), b"map", slow, b"map")))
    t2.start()
    release.set()
    t1.join(5)
    t2.join(5)
    assert out == ["table", "table"] and len(calls) == 1


@needs_accel
def test_utf8_strings_equal_python_and_strict():
    data = "ab\u00e9\u4e2d\U0001f600 x".encode() + b"\xff\xfe" + b"tail"
    starts = np.array([0, 2, -1, 0, 4], dtype=np.int64)
    ends = np.array([2, 13, 5, 0, 11], dtype=np.int64)
    fast = wire.utf8_strings(data, starts, ends)
    assert fast == [str(data[a:b], "utf-8") if a >= 0 else "" for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]
    with pytest.raises(UnicodeDecodeError):
        wire.utf8_strings(data, np.array([13], dtype=np.int64), np.array([15], dtype=np.int64))
    with pytest.raises(ValueError):
        wire.utf8_strings(data, np.array([0], dtype=np.int64), np.array([len(data) + 1], dtype=np.int64))


def test_cache_compares_the_bytes_behind_a_fingerprint():
    """Equal fingerprints share a table only when the map bytes are equal."""
    cache = optable.MetadataCache()
    assert cache.get(("fp",), b"map one", lambda: "first", b"map one") == "first"
    assert cache.get(("fp",), memoryview(b"map one"), lambda: "again", b"map one") == "first"
    assert cache.get(("fp",), b"map two", lambda: "own", b"map two") == "own"
    assert wire.same_bytes(b"abc", bytearray(b"abc")) and not wire.same_bytes(b"abc", b"abd")
    assert not wire.same_bytes(b"abc", b"ab")


def _same_plane(a, b) -> None:
    assert a.name == b.name and a.meta is b.meta
    for la, lb in zip(a.lines, b.lines, strict=True):
        assert la.name == lb.name
        for f in ("start_ps", "end_ps", "dur_ps", "self_ps", "depth", "parent", "meta"):
            assert np.array_equal(getattr(la.events, f), getattr(lb.events, f)), f


def test_plane_whose_table_is_in_flight_is_deferred_then_finished(monkeypatch):
    """While one thread decodes a shared table, a plane needing it returns a
    Deferred (its events decoded) instead of waiting; finished afterwards it
    equals the plane built in turn."""
    path = ROOT / "sample_traces" / "dense_short_fsdp.xplane.pb.gz"
    buf = capturefile.read_bytes(path)
    tcs = [r for r in reader.scan_space(buf, path).planes if r.kind == "tensorcore"]
    cache = optable.MetadataCache()
    gate, started = threading.Event(), threading.Event()
    orig = tb.metadata_from_columns

    def slow(*a, **k):
        started.set()
        assert gate.wait(30)
        return orig(*a, **k)

    monkeypatch.setattr(tb, "metadata_from_columns", slow)
    first: list = []
    t = threading.Thread(target=lambda: first.append(
        tb.build_plane(buf, tcs[0].offset, tcs[0].offset + tcs[0].length, "h", "tensorcore", 0, None, meta_cache=cache,
                       defer=True)))
    t.start()
    assert started.wait(30)
    got = tb.build_plane(buf, tcs[1].offset, tcs[1].offset + tcs[1].length, "h", "tensorcore", 0, None, meta_cache=cache,
                         defer=True)
    assert isinstance(got, tb.Deferred)
    gate.set()
    t.join(30)
    plane, origin = tb.finished(got)
    monkeypatch.setattr(tb, "metadata_from_columns", orig)
    in_turn = optable.MetadataCache()
    want = [tb.build_plane(buf, r.offset, r.offset + r.length, "h", "tensorcore", 0, None, meta_cache=in_turn) for r in tcs[:2]]
    assert plane.meta is first[0][0].meta
    assert origin == want[1][1]
    _same_plane(plane, replace(want[1][0], meta=plane.meta))
    assert tb.finished(first[0]) is first[0]  # a plane built in one go passes through
