"""A tiny XSpace builder for hand-made test traces (tests only).

Usage:
    sp = SpaceBuilder(hostname="h0")
    tc = sp.plane("/device:TPU:0", device_type="TPU v7x")
    ops = tc.line("XLA Ops", timestamp_ns=1_000)
    ops.event("%fusion.1 = bf16[8]{0} fusion(...)", start_ps=0, dur_ps=100,
              display="fusion.1", meta_stats={"hlo_category": "loop fusion"},
              stats={"group_id": 0})
    data = sp.bytes()
"""

from __future__ import annotations

from profanalyzer.read.xspace import xplane_pb2 as pb


class PlaneBuilder:
    def __init__(self, plane: pb.XPlane):
        self.p = plane
        self._stat_ids: dict[str, int] = {}
        self._meta_ids: dict[tuple[str, str], int] = {}

    def stat_id(self, name: str) -> int:
        sid = self._stat_ids.get(name)
        if sid is None:
            sid = len(self._stat_ids) + 1
            self._stat_ids[name] = sid
            self.p.stat_metadata[sid].id = sid
            self.p.stat_metadata[sid].name = name
        return sid

    def _fill(self, st: pb.XStat, name: str, value) -> None:
        st.metadata_id = self.stat_id(name)
        if isinstance(value, Ref):
            st.ref_value = self.stat_id(value.name)
        elif isinstance(value, bool):
            st.int64_value = int(value)
        elif isinstance(value, int):
            if value < 0:
                st.int64_value = value
            else:
                st.uint64_value = value
        elif isinstance(value, float):
            st.double_value = value
        elif isinstance(value, bytes):
            st.bytes_value = value
        else:
            st.str_value = str(value)

    def stats(self, **stats) -> PlaneBuilder:
        for k, v in stats.items():
            self._fill(self.p.stats.add(), k, v)
        return self

    def meta(self, name: str, display: str = "", stats: dict | None = None) -> int:
        key = (name, display)
        mid = self._meta_ids.get(key)
        if mid is None:
            mid = len(self._meta_ids) + 1
            self._meta_ids[key] = mid
            md = self.p.event_metadata[mid]
            md.id = mid
            md.name = name
            md.display_name = display
            for k, v in (stats or {}).items():
                self._fill(md.stats.add(), k, v)
        return mid

    def line(self, name: str, timestamp_ns: int = 0, line_id: int | None = None) -> LineBuilder:
        ln = self.p.lines.add()
        ln.id = line_id if line_id is not None else len(self.p.lines)
        ln.name = name
        ln.timestamp_ns = timestamp_ns
        return LineBuilder(self, ln)


class Ref:
    """A ref_value stat: the value is the name of another stat-metadata entry."""

    def __init__(self, name: str):
        self.name = name


class LineBuilder:
    def __init__(self, plane: PlaneBuilder, line: pb.XLine):
        self.plane = plane
        self.ln = line

    def event(self, name: str, start_ps: int, dur_ps: int, display: str = "", meta_stats: dict | None = None, stats: dict | None = None) -> pb.XEvent:
        mid = self.plane.meta(name, display, meta_stats)
        ev = self.ln.events.add()
        ev.metadata_id = mid
        ev.offset_ps = start_ps
        ev.duration_ps = dur_ps
        for k, v in (stats or {}).items():
            self.plane._fill(ev.stats.add(), k, v)
        return ev


class SpaceBuilder:
    def __init__(self, hostname: str | None = "testhost"):
        self.space = pb.XSpace()
        if hostname:
            self.space.hostnames.append(hostname)

    def plane(self, name: str, device_type: str | None = None, plane_id: int | None = None) -> PlaneBuilder:
        p = self.space.planes.add()
        p.id = plane_id if plane_id is not None else len(self.space.planes)
        p.name = name
        b = PlaneBuilder(p)
        if device_type:
            b.stats(device_type_string=device_type)
        return b

    def bytes(self) -> bytes:
        return self.space.SerializeToString(deterministic=True)
