"""Reader and trace-model tests on hand-built XSpaces."""

from __future__ import annotations

import gzip
import os

import numpy as np
import pytest
from xsb import Ref, SpaceBuilder

from profanalyzer.core.errors import InputError, NoTpuPlanesError
from profanalyzer.model.trace import self_times
from profanalyzer.read.xspace import reader
from profanalyzer.read.xspace.build import load_trace

EPOCH_NS = 1_732_000_000_000_000_000  # epoch-based line timestamps (ns)


def _basic_space(hostname="h0", ts_ns=EPOCH_NS, with_steps=True, extra_planes=True) -> bytes:
    sp = SpaceBuilder(hostname)
    if extra_planes:
        host = sp.plane("/host:CPU")
        host.line("python", timestamp_ns=ts_ns).event("train_step", 0, 5_000_000)
        md = sp.plane("/host:metadata")
        md.meta("jit_train_step", stats={"Hlo Proto": b"\x00" * 4096})
    tc = sp.plane("/device:TPU:0", device_type="TPU v7x")
    tc.stats(peak_teraflops_per_second=1153.5)
    if with_steps:
        st = tc.line("Steps", timestamp_ns=ts_ns)
        st.event("0", 0, 1_000_000, stats={"group_id": 0})
        st.event("1", 1_000_000, 1_000_000, stats={"group_id": 1})
    mods = tc.line("XLA Modules", timestamp_ns=ts_ns)
    mods.event("jit_train_step(7)", 0, 900_000)
    mods.event("jit_train_step(7)", 1_000_000, 900_000)
    mods.event("jit_other(8)", 950_000, 10_000)
    ops = tc.line("XLA Ops", timestamp_ns=ts_ns)
    # Step 0: a while parent [0, 600k) with two children, then a sibling.
    ops.event("%while.1 = (s32[]) while(...)", 0, 600_000, display="while.1",
              meta_stats={"hlo_category": "while"}, stats={"group_id": 0})
    ops.event("%fusion.2 = bf16[8,8]{1,0} fusion(bf16[8,8] %a, bf16[8,8] %b), kind=kOutput", 100_000, 200_000,
              display="fusion.2", meta_stats={"hlo_category": "convolution fusion", "flops": 1000, "tf_op": "jit(f)/jvp(M)/dot_general:"},
              stats={"group_id": 0})
    ops.event("%fusion.3 = bf16[8]{0} fusion(bf16[8] %c), kind=kLoop", 350_000, 150_000, display="fusion.3",
              meta_stats={"hlo_category": Ref("loop fusion")}, stats={"group_id": 0})
    # Device timespan override: the event's own offset/duration are wrong on purpose.
    ops.event("%copy.4 = bf16[8]{0} copy(bf16[8] %d)", 10, 10, display="copy.4",
              meta_stats={"hlo_category": "data formatting"},
              stats={"group_id": 0, "device_offset_ps": 700_000, "device_duration_ps": 50_000})
    ops.event("%fusion.2 = bf16[8,8]{1,0} fusion(bf16[8,8] %a, bf16[8,8] %b), kind=kOutput", 1_100_000, 200_000,
              display="fusion.2", stats={"group_id": 1})
    return sp.bytes()


def _write(tmp_path, name, data):
    p = tmp_path / name
    p.write_bytes(data)
    return p


def test_nested_self_time_ref_value_device_offset(tmp_path):
    f = _write(tmp_path, "h0.xplane.pb", _basic_space())
    tr = load_trace(f)
    assert tr.chip.key == "tpu7x"
    assert tr.chip_source == 'device_type_string "TPU v7x"'
    assert [p.name for p in tr.planes] == ["/device:TPU:0"]  # host planes not decoded
    tc = tr.planes[0]
    ev = tc.line("XLA Ops").events
    names = [tc.meta.display_name[r] for r in ev.meta]
    assert names == ["while.1", "fusion.2", "fusion.3", "copy.4", "fusion.2"]
    # while self time = 600k - 200k - 150k
    assert ev.self_ps.tolist() == [250_000, 200_000, 150_000, 50_000, 200_000]
    assert ev.depth.tolist() == [0, 1, 1, 0, 0]
    # device_offset_ps / device_duration_ps override the event's own timing.
    assert ev.start_ps[3] == 700_000 and ev.dur_ps[3] == 50_000
    # ref_value stat resolves to the referenced stat-metadata name.
    row = ev.meta[2]
    assert tc.meta.category[row] == "loop fusion"
    assert tc.meta.category[ev.meta[1]] == "convolution fusion"
    assert tc.meta.flops[ev.meta[1]] == 1000
    assert ev.int_stat("group_id").tolist() == [0, 0, 0, 0, 1]
    steps = tr.steps[tc.label]
    assert steps.source == "Steps line"
    assert steps.number.tolist() == [0, 1]
    assert steps.dur_ps.tolist() == [1_000_000, 1_000_000]


def test_epoch_and_zero_timestamps_give_same_relative_times(tmp_path):
    a = load_trace(_write(tmp_path, "a.xplane.pb", _basic_space(ts_ns=EPOCH_NS)))
    b = load_trace(_write(tmp_path, "b.xplane.pb", _basic_space(ts_ns=0)))
    ea = a.planes[0].line("XLA Ops").events
    eb = b.planes[0].line("XLA Ops").events
    assert ea.start_ps.tolist() == eb.start_ps.tolist()
    assert a.origin_ns == EPOCH_NS and b.origin_ns == 0


def test_steps_from_xla_modules_when_no_steps_line(tmp_path):
    tr = load_trace(_write(tmp_path, "h.xplane.pb", _basic_space(with_steps=False)))
    st = tr.steps[tr.planes[0].label]
    assert st.source == "XLA Modules: jit_train_step(7)"
    assert st.start_ps.tolist() == [0, 1_000_000]
    assert st.dur_ps.tolist() == [900_000, 900_000]


def test_gzip_and_run_folder_with_two_hosts(tmp_path):
    run = tmp_path / "logs" / "plugins" / "profile" / "2026_11_30_10_00_00"
    run.mkdir(parents=True)
    (run / "h0.xplane.pb.gz").write_bytes(gzip.compress(_basic_space("h0"), mtime=0))
    (run / "h1.xplane.pb").write_bytes(_basic_space("h1"))
    tr = load_trace(run)
    assert tr.input_kind == "run"
    assert [h.name for h in tr.hosts] == ["h0", "h1"]
    assert len(tr.tensorcores) == 2
    assert len({p.label for p in tr.planes}) == 2
    # Log dir: picks the newest run and says so.
    older = tmp_path / "logs" / "plugins" / "profile" / "2026_11_29_10_00_00"
    older.mkdir()
    (older / "h0.xplane.pb").write_bytes(_basic_space("old"))
    tr2 = load_trace(tmp_path / "logs")
    assert tr2.input_kind == "logdir" and tr2.run == "2026_11_30_10_00_00"
    assert "newest" in tr2.note


def test_unknown_fields_are_ignored(tmp_path):
    data = _basic_space()
    # Append an unknown top-level field (number 99, length-delimited) and an
    # unknown field inside a plane: both must be tolerated.
    unknown = bytes([(99 << 3 | 2) & 0x7F | 0x80, (99 << 3 | 2) >> 7, 3]) + b"abc"
    tr = load_trace(_write(tmp_path, "u.xplane.pb", data + unknown))
    assert len(tr.tensorcores) == 1
    from profanalyzer.read.xspace import xplane_pb2 as pb

    sp = pb.XSpace.FromString(data)
    idx = next(i for i, p in enumerate(sp.planes) if p.name.startswith("/device"))
    # Unknown varint field 15 inside the device plane.
    sp.planes[idx].ParseFromString(sp.planes[idx].SerializeToString() + bytes([(15 << 3) | 0, 7]))
    tr = load_trace(_write(tmp_path, "u2.xplane.pb", sp.SerializeToString()))
    assert tr.planes[0].line("XLA Ops") is not None


def test_no_tpu_planes_is_a_clear_error(tmp_path):
    sp = SpaceBuilder("cpu-only")
    sp.plane("/host:CPU").line("t").event("x", 0, 1)
    with pytest.raises(NoTpuPlanesError, match="no TPU device planes"):
        load_trace(_write(tmp_path, "c.xplane.pb", sp.bytes()))
    gp = SpaceBuilder("gpu")
    gp.plane("/device:GPU:0").line("Stream #1").event("k", 0, 1)
    with pytest.raises(NoTpuPlanesError, match="GPU capture"):
        load_trace(_write(tmp_path, "g.xplane.pb", gp.bytes()))


@pytest.mark.parametrize(
    "data,match",
    [
        (b"", "empty file"),
        (b'{"traceEvents": []}', "JSON"),
        (os.urandom(0) + bytes(range(256)) * 4, "XSpace|corrupt|truncated|no planes"),
    ],
)
def test_bad_bytes(tmp_path, data, match):
    with pytest.raises(InputError, match=match):
        load_trace(_write(tmp_path, "bad.xplane.pb", data))


def test_truncated_file(tmp_path):
    data = _basic_space()
    with pytest.raises(InputError, match="truncated|corrupt"):
        load_trace(_write(tmp_path, "t.xplane.pb", data[: len(data) - 7]))


def test_truncated_gzip(tmp_path):
    gz = gzip.compress(_basic_space(), mtime=0)
    with pytest.raises(InputError, match="gzip"):
        load_trace(_write(tmp_path, "t.xplane.pb.gz", gz[: len(gz) // 2]))


def test_missing_path_and_empty_dir(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_trace(tmp_path / "nope.xplane.pb")
    with pytest.raises(InputError, match="no \\*.xplane.pb files"):
        load_trace(tmp_path)


def test_scan_reads_plane_names_without_decoding(tmp_path):
    data = _basic_space()
    idx = reader.scan_space(data, tmp_path / "x")
    assert [p.kind for p in idx.planes] == ["host", "metadata", "tensorcore"]
    assert idx.hostnames == ("h0",)


def test_plane_kind_names():
    assert reader.plane_kind("/device:TPU:3") == ("tensorcore", 3, None)
    assert reader.plane_kind("/device:TPU:3 [12]") == ("tensorcore", 3, None)
    assert reader.plane_kind("/device:TPU:3 SparseCore 1") == ("sparsecore", 3, 1)
    assert reader.plane_kind("/device:TPU:3 SparseCore Xyz 1") == ("sparsecore", 3, 1)
    assert reader.plane_kind("/device:GPU:0")[0] == "gpu"
    assert reader.plane_kind("/host:metadata")[0] == "metadata"


def test_self_times_flat_and_nested():
    s = np.array([0, 10, 20, 50], dtype=np.int64)
    e = np.array([100, 20, 40, 60], dtype=np.int64)
    st, d = self_times(s, e)
    assert st.tolist() == [100 - 10 - 20 - 10, 10, 20, 10]
    assert d.tolist() == [0, 1, 1, 1]
    s2 = np.array([0, 10], dtype=np.int64)
    e2 = np.array([10, 30], dtype=np.int64)
    st2, d2 = self_times(s2, e2)
    assert st2.tolist() == [10, 20] and d2.tolist() == [0, 0]


@pytest.mark.parametrize("ids", [
    np.arange(1, 50, dtype=np.int64),  # dense: table lookup
    np.asarray([3, 7, 1 << 40, 1 << 62], dtype=np.int64),  # sparse and huge: binary search
    np.asarray([-5, 0, 2, 9], dtype=np.int64),  # a negative id: binary search
    np.zeros(0, dtype=np.int64),
])
def test_meta_index_maps_ids_to_rows_and_unknown_to_minus_one(ids):
    from profanalyzer.read.xspace.events import MetaIndex

    rng = np.random.default_rng(1)
    pool = np.concatenate([ids, [-1, -(1 << 63), 10_000, (1 << 63) - 1, 48, 8]]).astype(np.int64)
    mid = rng.choice(pool, 500)
    want = np.asarray([int(np.flatnonzero(ids == m)[0]) if m in ids else -1 for m in mid.tolist()], dtype=np.int32)
    got = MetaIndex(ids).rows(mid)
    assert got.dtype == np.int32 and (got == want).all()
    inside = mid[np.isin(mid, ids)]  # only known ids: the direct-gather path
    assert (MetaIndex(ids).rows(inside) == want[np.isin(mid, ids)]).all()
