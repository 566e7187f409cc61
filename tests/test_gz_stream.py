"""Streamed `.xplane.pb.gz` reading (`reader.open_space`): the same analysis
as the plain file, the unwanted planes never held, the same one-line errors."""

from __future__ import annotations

import gzip
import json
import random
import tracemalloc

import pytest
from conftest import sample_path
from xsb import SpaceBuilder

from profanalyzer.core.errors import InputError
from profanalyzer.findings.engine import run_rules
from profanalyzer.model.documents import result_document
from profanalyzer.pipeline.run import RunOptions, run_analysis
from profanalyzer.read.xspace import capturefile, reader
from profanalyzer.read.xspace.metadata import program_plane

EPOCH_NS = 1_732_000_000_000_000_000


def _device(r: reader.PlaneRef) -> bool:
    return r.kind in ("tensorcore", "sparsecore")


def _doc(path, options: RunOptions) -> str:
    a = run_analysis(path, options)
    text = json.dumps(result_document(a, run_rules(a)), sort_keys=True)
    return text.replace(str(path), "<input>")


@pytest.mark.parametrize("name", ["dense_short_fsdp", "hlo_memory_dense", "host_bound_input", "serving_tp2_w4"])
def test_gz_and_plain_give_the_same_analysis(tmp_path, name):
    gz = sample_path(name)
    assert gz.name.endswith(".gz")
    plain = tmp_path / gz.name[: -len(".gz")]
    plain.write_bytes(gzip.decompress(gz.read_bytes()))
    opts = RunOptions(jobs=1, memory=True, host_activity=True)
    assert _doc(gz, opts) == _doc(plain, opts)


def test_gz_run_folder_same_as_plain(tmp_path):
    """A run folder of .gz host files (loaded by the process pool) reads as its plain copy."""
    src = sorted((sample_path("dense_short_fsdp").parent / "dense_short_fsdp_2hosts").glob("plugins/profile/*/*.xplane.pb"))
    assert len(src) == 2
    gz_run, plain_run = tmp_path / "gz" / "run", tmp_path / "plain" / "run"
    gz_run.mkdir(parents=True)
    plain_run.mkdir(parents=True)
    for f in src:
        (gz_run / (f.name + ".gz")).write_bytes(gzip.compress(f.read_bytes(), compresslevel=1, mtime=0))
        (plain_run / f.name).write_bytes(f.read_bytes())
    opts = RunOptions(jobs=2)
    a = _doc(gz_run, opts).replace(".xplane.pb.gz", ".xplane.pb")
    assert a == _doc(plain_run, opts)


def test_open_space_index_matches_scan_space():
    gz = sample_path("dense_short_fsdp")
    raw = gzip.decompress(gz.read_bytes())
    full = reader.scan_space(raw, gz)
    buf, index = reader.open_space(gz, want=_device)
    assert index.size == full.size == len(raw)
    assert (index.hostnames, index.errors, index.warnings) == (full.hostnames, full.errors, full.warnings)
    assert [(r.index, r.name, r.id, r.kind, r.length) for r in index.planes] == [
        (r.index, r.name, r.id, r.kind, r.length) for r in full.planes
    ]
    held = [r for r in index.planes if r.held]
    assert {r.name for r in held} == {r.name for r in full.planes if _device(r)}
    assert len(buf) == sum(r.length for r in held) < len(raw)
    for r, f in zip(index.planes, full.planes, strict=True):
        if r.held:
            assert bytes(buf[r.offset : r.offset + r.length]) == raw[f.offset : f.offset + f.length]
        else:
            assert r.offset == -1
    # Every plane by default.
    buf_all, all_index = reader.open_space(gz)
    assert all(r.held for r in all_index.planes)
    assert b"".join(bytes(buf_all[r.offset : r.offset + r.length]) for r in all_index.planes) == b"".join(
        raw[f.offset : f.offset + f.length] for f in full.planes
    )


def test_plain_file_is_mapped_whole(tmp_path):
    raw = gzip.decompress(sample_path("serving_tp2_w4").read_bytes())
    p = tmp_path / "s.xplane.pb"
    p.write_bytes(raw)
    buf, index = reader.open_space(p, want=_device)
    assert bytes(buf) == raw and all(r.held for r in index.planes)
    assert index == reader.scan_space(raw, p)


def _space_with_host_bulk(bulk: int) -> bytes:
    sp = SpaceBuilder("h0")
    host = sp.plane("/host:CPU")
    host.line("python", timestamp_ns=EPOCH_NS).event("train_step", 0, 5_000_000)
    host.meta("bulk", stats={"Hlo Proto": b"\x00" * bulk})
    tc = sp.plane("/device:TPU:0", device_type="TPU v7x")
    st = tc.line("Steps", timestamp_ns=EPOCH_NS)
    st.event("0", 0, 1_000_000, stats={"group_id": 0})
    st.event("1", 1_000_000, 1_000_000, stats={"group_id": 1})
    ops = tc.line("XLA Ops", timestamp_ns=EPOCH_NS)
    ops.event("%fusion.1 = bf16[8]{0} fusion(bf16[8] %a), kind=kLoop", 0, 500_000, display="fusion.1", stats={"group_id": 0})
    ops.event("%fusion.1 = bf16[8]{0} fusion(bf16[8] %a), kind=kLoop", 1_000_000, 500_000, display="fusion.1", stats={"group_id": 1})
    md = sp.plane("/host:metadata")
    md.meta("jit_train_step", stats={"Hlo Proto": b"\x00" * bulk})
    return sp.bytes()


def test_skipped_planes_are_never_held(tmp_path):
    """A 48 MiB host plane and 48 MiB of /host:metadata around one device
    plane: reading the device plane never allocates anything near their size."""
    bulk = 48 << 20
    raw = _space_with_host_bulk(bulk)
    p = tmp_path / "bulk.xplane.pb.gz"
    p.write_bytes(gzip.compress(raw, compresslevel=1, mtime=0))
    del raw
    tracemalloc.start()
    try:
        buf, index = reader.open_space(p, want=_device)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert index.size > 2 * bulk
    assert [r.kind for r in index.planes if r.held] == ["tensorcore"]
    assert len(buf) < 1 << 16
    assert peak < 16 << 20, f"peak {peak / 2**20:.1f} MiB while reading a {index.size / 2**20:.0f} MiB space"
    # The metadata plane alone, when asked for: held whole, host plane still skipped.
    buf, index = reader.open_space(p, want=lambda r: r.kind == "metadata")
    (md,) = [r for r in index.planes if r.held]
    assert md.kind == "metadata" and md.length > bulk and len(buf) == md.length


def _chunks(data: bytes, rng: random.Random):
    pos = 0
    while pos < len(data):
        k = rng.choice((1, 2, 3, 7, 64, 1000, 65536))
        yield data[pos : pos + k]
        pos += k


@pytest.mark.parametrize("seed", range(4))
def test_stream_walker_is_independent_of_chunk_boundaries(seed):
    """Headers, plane heads and strings split anywhere: the same index and bytes."""
    raw = gzip.decompress(sample_path("serving_tp2_w4").read_bytes())
    full = reader.scan_space(raw, sample_path("serving_tp2_w4"))
    rng = random.Random(seed)
    want = (lambda r: True) if seed % 2 else _device
    s = reader._SpaceStream(want)
    for chunk in _chunks(raw, rng):
        s.feed(chunk)
    index = s.finish(full.path)
    assert [(r.name, r.id, r.kind, r.length) for r in index.planes] == [(r.name, r.id, r.kind, r.length) for r in full.planes]
    assert index.hostnames == full.hostnames and index.size == len(raw)
    for r, f in zip(index.planes, full.planes, strict=True):
        assert r.held == want(f)
        if r.held:
            assert bytes(s.out[r.offset : r.offset + r.length]) == raw[f.offset : f.offset + f.length]


def _message(path) -> str:
    with pytest.raises(InputError) as e:
        reader.open_space(path, want=_device)
    return str(e.value).replace(str(path), "<file>")


_B = _space_with_host_bulk(4096)


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(_B[:-7], id="xspace-truncated-in-a-plane"),
        pytest.param(_B[:3], id="xspace-truncated-in-a-header"),
        pytest.param(_B + b"\x0a\xff\xff\xff\xff\x0f", id="huge-field-after-planes"),
        pytest.param(b"\x0a\x05\x12\x09abc", id="corrupt-plane-header"),
        pytest.param(b'{"traceEvents": []}', id="json"),
        pytest.param(b"<!DOCTYPE html><html></html>", id="html"),
        pytest.param(b"\x22\x02h0", id="no-planes"),
        pytest.param(_B.decode("latin-1").encode("utf-8"), id="text-mangled"),
        pytest.param(_B + b"\x0b", id="group-wire-type"),
    ],
)
def test_bad_xspace_inside_gzip_says_what_the_plain_file_says(tmp_path, payload):
    plain = tmp_path / "x.xplane.pb"
    plain.write_bytes(payload)
    gz = tmp_path / "x.xplane.pb.gz"
    gz.write_bytes(gzip.compress(payload, mtime=0))
    assert _message(gz) == _message(plain)
    assert "\n" not in _message(gz)


def test_gzip_errors_while_streaming(tmp_path, monkeypatch):
    data = gzip.compress(_B, mtime=0)
    cases = {
        "truncated gzip file": data[:-9],
        "corrupt gzip data": data[:40] + b"\0" * 64,
        "unexpected data after the compressed stream": data + b"garbage!",
    }
    for want, blob in cases.items():
        p = tmp_path / "bad.xplane.pb.gz"
        p.write_bytes(blob)
        assert want in _message(p)
    # A truncated gzip that ends inside a skipped host plane: the gzip error, not a plane error.
    big = gzip.compress(_space_with_host_bulk(8 << 20), mtime=0)
    p.write_bytes(big[: len(big) // 3])
    assert "truncated gzip file" in _message(p)
    # Bomb guard: counted on the stream, whatever is held.
    monkeypatch.setattr(capturefile, "MAX_DECOMPRESSED_BYTES", 1 << 20)
    p.write_bytes(big)
    assert "decompresses to more than 1 MiB; refusing (gzip bomb guard" in _message(p)


def test_multi_member_gzip_split_inside_a_plane(tmp_path):
    raw = _space_with_host_bulk(1 << 20)
    k = len(raw) // 2 + 11
    p = tmp_path / "mm.xplane.pb.gz"
    p.write_bytes(gzip.compress(raw[:k], mtime=0) + gzip.compress(raw[k:], mtime=0) + b"\0" * 100)
    buf, index = reader.open_space(p, want=_device)
    full = reader.scan_space(raw, p)
    (tc,) = [r for r in full.planes if r.kind == "tensorcore"]
    (got,) = [r for r in index.planes if r.held]
    assert bytes(buf[got.offset : got.offset + got.length]) == raw[tc.offset : tc.offset + tc.length]
    assert index.size == len(raw)


# --- the memory read path: selective planes give what whole planes give ------

from realcap import REAL  # noqa: E402

from profanalyzer.read import allocator  # noqa: E402
from profanalyzer.read.xspace import xplane_pb2  # noqa: E402


def _programs(meta: xplane_pb2.XPlane) -> list[str]:
    return sorted({em.name for em in meta.event_metadata.values()}) + ["", "jit_absent(1)"]


def _check_selective_planes(path) -> int:
    buf, index = reader.open_space(path, want=lambda r: r.kind in ("metadata", "host"))
    checked = 0
    for r in index.planes:
        if not r.held:
            continue
        whole = xplane_pb2.XPlane.FromString(bytes(buf[r.offset : r.offset + r.length]))
        if r.kind == "metadata":
            for program in _programs(whole):
                part = program_plane(buf, r.offset, r.offset + r.length, (program,))
                assert allocator.program_hlo_proto(part, program) == allocator.program_hlo_proto(whole, program), (path, program)
                assert list(part.event_metadata) == list(whole.event_metadata)
                checked += 1
        elif r.kind == "host":
            part = allocator.allocator_plane(buf, r.offset, r.offset + r.length)
            assert allocator.allocator_peak([part]) == allocator.allocator_peak([whole]), path
            checked += 1
    return checked


def test_selective_memory_planes_match_whole_planes_on_samples():
    from conftest import sample_names

    assert sum(_check_selective_planes(sample_path(n)) for n in sample_names() if n != "dense_short_fsdp_2hosts") > 30


def test_selective_memory_planes_match_whole_planes_on_real_captures():
    files = sorted(REAL.glob("*.xplane.pb*")) if REAL.exists() else []
    if not files:
        pytest.skip(f"no real captures in {REAL}")
    for f in files:
        _check_selective_planes(f)


def test_metadata_plane_keeps_the_program_chosen_among_same_base_names(tmp_path):
    """Several programs share the base name and none is the exact one: the
    choice follows the map's order, which stripping the others keeps."""
    sp = SpaceBuilder("h0")
    md = sp.plane("/host:metadata")
    for k in (7, 3, 9, 1):
        md.meta(f"jit_step({k})", stats={"Hlo Proto": bytes([k]) * 64})
    md.meta("jit_other(2)", stats={"Hlo Proto": b"\x02" * (1 << 20)})
    p = tmp_path / "m.xplane.pb"
    p.write_bytes(sp.bytes())
    buf, index = reader.open_space(p)
    (r,) = index.planes
    whole = xplane_pb2.XPlane.FromString(bytes(buf[r.offset : r.offset + r.length]))
    for program in ("jit_step(5)", "jit_step(9)", "jit_other(4)", "jit_none(1)"):
        part = program_plane(buf, r.offset, r.offset + r.length, (program,))
        assert allocator.program_hlo_proto(part, program) == allocator.program_hlo_proto(whole, program)
        assert part.ByteSize() < (1 << 20) or program.startswith("jit_other")


def test_allocator_plane_keeps_the_allocator_lines(tmp_path):
    sp = SpaceBuilder("h0")
    host = sp.plane("/host:CPU")
    noise = host.line("python", timestamp_ns=EPOCH_NS)
    for k in range(2000):
        noise.event(f"fn_{k % 7}", k * 1000, 500)
    mem = host.line("allocator", timestamp_ns=EPOCH_NS)
    for k, (res, alloc) in enumerate([(100, 5), (100, 900), (40, 50)]):
        mem.event("MemoryAllocation" if k != 1 else "MemoryDeallocation", k * 10, 5,
                  stats={"index_on_host": k % 2, "bytes_reserved": res, "bytes_allocated": alloc, "bytes_available": 7})
    p = tmp_path / "a.xplane.pb"
    p.write_bytes(sp.bytes())
    buf, index = reader.open_space(p)
    (r,) = index.planes
    whole = xplane_pb2.XPlane.FromString(bytes(buf[r.offset : r.offset + r.length]))
    part = allocator.allocator_plane(buf, r.offset, r.offset + r.length)
    assert [ln.name for ln in part.lines] == ["allocator"]
    assert allocator.allocator_peak([part]) == allocator.allocator_peak([whole])
    assert allocator.allocator_peak([part]).in_use == 1000


def _sources_gz_vs_plain(tmp_path, gz, program: str):
    plain = tmp_path / "plain.xplane.pb"
    plain.write_bytes(gzip.decompress(gz.read_bytes()))
    a, b = allocator.read_sources(gz, program), allocator.read_sources(plain, program)
    assert a == b
    return a


def _dominant(path) -> str:
    from profanalyzer.analyze import memory
    from profanalyzer.read.xspace.build import load_trace

    return memory.dominant_program(load_trace(path))


@pytest.mark.parametrize("name", ["hlo_memory_dense", "host_offload_train", "serving_tp2_w4"])
def test_streamed_memory_read_equals_the_plain_one(tmp_path, name):
    gz = sample_path(name)
    src = _sources_gz_vs_plain(tmp_path, gz, _dominant(gz))
    if name == "hlo_memory_dense":
        assert src.assignment is not None


def test_streamed_memory_read_equals_the_plain_one_on_real_captures(tmp_path):
    files = sorted(REAL.glob("*.xplane.pb.gz")) if REAL.exists() else []
    if not files:
        pytest.skip(f"no real captures in {REAL}")
    for f in files:
        _sources_gz_vs_plain(tmp_path, f, _dominant(f))


def _alloc_space(bulk: int) -> bytes:
    sp = SpaceBuilder("h0")
    host = sp.plane("/host:CPU")
    for t in range(3):
        noise = host.line(f"python {t}", timestamp_ns=EPOCH_NS)
        for k in range(3000):
            noise.event(f"fn_{k % 7}", k * 1000, 500)
    mem = host.line("allocator", timestamp_ns=EPOCH_NS)
    for k, (res, alloc) in enumerate([(100, 5), (100, 900), (40, 50)]):
        mem.event("MemoryAllocation", k * 10, 5,
                  stats={"index_on_host": k % 2, "bytes_reserved": res, "bytes_allocated": alloc, "bytes_available": 7})
    host.meta("bulk", stats={"Hlo Proto": b"\x01" * bulk})
    md = sp.plane("/host:metadata")
    for k in range(4):
        md.meta(f"jit_other({k})", stats={"Hlo Proto": b"\x00" * bulk})
    md.meta("jit_train_step(7)", stats={"Hlo Proto": b"\x08\x01"})
    tc = sp.plane("/device:TPU:0", device_type="TPU v7x")
    tc.line("XLA Ops", timestamp_ns=EPOCH_NS).event("%fusion.1 = bf16[8]{0} fusion(bf16[8] %a), kind=kLoop", 0, 5, display="fusion.1")
    return sp.bytes()


def test_streamed_memory_read_holds_no_bulk(tmp_path):
    """5 x 16 MiB of HLO protos and host bulk: the allocator lines are found
    (a second streamed pass) and the kept HLO proto read, holding about one
    field at a time, never a plane."""
    bulk = 16 << 20
    p = tmp_path / "m.xplane.pb.gz"
    p.write_bytes(gzip.compress(_alloc_space(bulk), compresslevel=1, mtime=0))
    tracemalloc.start()
    try:
        src = allocator.read_sources(p, "jit_train_step(7)")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert src.allocator is not None and src.allocator.in_use == 1000 and src.allocator.devices == 2
    size = len(gzip.decompress(p.read_bytes()))
    assert size > 5 * bulk
    assert peak < 5 * bulk // 2, f"peak {peak / 2**20:.1f} MiB of a {size / 2**20:.0f} MiB space (one field: {bulk / 2**20:.0f} MiB)"
    plain = tmp_path / "m.xplane.pb"
    plain.write_bytes(gzip.decompress(p.read_bytes()))
    assert allocator.read_sources(plain, "jit_train_step(7)") == src


def test_streamed_host_events_equal_the_plain_ones(tmp_path):
    from profanalyzer.read.xspace.hostlines import read_host_events

    files = [sample_path(n) for n in ("host_bound_input", "dense_short_fsdp")]
    files += sorted(REAL.glob("*.xplane.pb.gz")) if REAL.exists() else []
    lines_read = 0
    for gz in files:
        plain = tmp_path / "plain.xplane.pb"
        plain.write_bytes(gzip.decompress(gz.read_bytes()))
        from profanalyzer.read.xspace.build import load_trace

        origin = load_trace(gz).origin_ns
        a, b = read_host_events(gz, origin), read_host_events(plain, origin)
        assert a[0] == b[0] and a[4] == b[4], gz
        for x, y in zip(a[1:4], b[1:4], strict=True):
            assert (x == y).all(), gz
        lines_read += a[4]
    assert lines_read > 0
