"""Fuzzing the whole pipeline with mutated real-layout XSpace bytes (issue 8).

Property: for any mutation of a real capture, reading, describing, analysing,
ranking and rendering (`load_trace` -> `trace_info`; `analyze_trace` ->
`run_rules` -> JSON, terminal summary, Markdown, HTML) either succeeds or raises `InputError` (the CLI's exit 2):
never another exception type, never a failed internal self-check
(`InvariantError`, exit 3), never a numpy/pandas warning (they mean garbage
arithmetic and would add lines to the CLI's stderr).

Seeds: the hand-built space of test_reader and three synthesized TPU7x
captures trimmed to one TensorCore (+ its SparseCores and the host planes),
one step, one layer. Mutations (tests/xsmut.py): byte flips, truncations,
insertions, duplicated / swapped / deleted chunks, varint corruption of the
raw bytes; and structure-aware ones that keep the framing valid (extreme
varints, deleted / duplicated / moved / renumbered / re-typed fields,
mangled strings, shuffled siblings). Inputs also go through gzip, and some
are analysed as one host of a two-host run folder.

`make test` runs FUZZ_EXAMPLES (default 200) deterministic examples
(derandomize, no example database: nothing is written under .hypothesis/);
`PROFANALYZE_FUZZ_EXAMPLES=10000 make fuzz` runs the long campaign.
"""

from __future__ import annotations

import functools
import gzip
import json
import os
import warnings

import pytest
import xsmut
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from test_reader import _basic_space

from profanalyzer.analyze.analysis import analyze_trace
from profanalyzer.api.info import trace_info
from profanalyzer.core.errors import InputError
from profanalyzer.findings.engine import run_rules
from profanalyzer.model.trace import ANALYSIS_LINES
from profanalyzer.read.xspace import wire, xplane_pb2
from profanalyzer.read.xspace.build import load_trace
from profanalyzer.report.html import render_html
from profanalyzer.report.info_text import format_info
from profanalyzer.report.markdown import render_markdown
from profanalyzer.report.terminal import format_summary

FUZZ_EXAMPLES = int(os.environ.get("PROFANALYZE_FUZZ_EXAMPLES", "200"))

settings.register_profile(
    "profanalyzer-fuzz",
    max_examples=FUZZ_EXAMPLES,
    derandomize=True,  # the same examples on every run: `make test` stays deterministic
    database=None,  # no .hypothesis/ example database
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
    print_blob=True,
)


def _trimmed_synth(name: str) -> bytes:
    """A synthesized capture (1 step + warm-up, 1 layer) with only TPU:0 kept."""
    from profanalyzer.synth import synthesize

    files, _ = synthesize(name, steps=2, layers=1)
    sp = xplane_pb2.XSpace.FromString(files[0][1])
    keep = [p for p in sp.planes if not p.name.startswith("/device:TPU:") or p.name == "/device:TPU:0" or p.name.startswith("/device:TPU:0 ")]
    del sp.planes[:]
    sp.planes.extend(keep)
    return sp.SerializeToString(deterministic=True)


@functools.cache
def seed_bytes(name: str) -> bytes:
    if name == "hand_built":
        return _basic_space()
    return _trimmed_synth(name)


SEEDS = ("hand_built", "dense_short_fsdp", "offload_on", "no_steps_line")

_mutation = st.tuples(
    st.integers(0, len(xsmut.OPS) - 1),
    st.integers(0, (1 << 20) - 1),
    st.integers(0, (1 << 20) - 1),
    st.integers(0, (1 << 64) - 1),
)


def run_pipeline(path, *, accel: bool) -> None:
    """The CLI's analyze path, in-process. Raises whatever it raises."""
    saved = wire._accel
    if not accel:
        wire._accel = None  # the numpy decoder instead of the C one
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            ti = trace_info(load_trace(path, jobs=1))  # `profanalyze info`: every line
            format_info(ti)
            json.dumps(ti.to_dict(), sort_keys=True, allow_nan=False)
            # `profanalyze analyze` (the lines it reads; the others only peeked
            # at): JSON, terminal, Markdown, HTML
            a = analyze_trace(load_trace(path, jobs=1, lines=ANALYSIS_LINES))
            f = run_rules(a)
            d = a.to_dict()
            d.update(f.to_dict())
            json.dumps(d, sort_keys=True, allow_nan=False)
            format_summary(a, findings=f)
            render_markdown(a, f)
            render_html(a, f, command_line="profanalyze fuzz", input_sha256="0" * 64)
    finally:
        wire._accel = saved


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


def test_seeds_analyse_cleanly(fuzz_dir):
    """The unmutated seeds go through the whole pipeline (else the fuzz tests little)."""
    for name in SEEDS:
        p = fuzz_dir / f"{name}.xplane.pb"
        p.write_bytes(seed_bytes(name))
        for accel in (True, False):
            run_pipeline(p, accel=accel)
        assert xsmut.serialize(xsmut.parse(seed_bytes(name))) == seed_bytes(name)


@settings(settings.get_profile("profanalyzer-fuzz"))
@given(
    seed=st.sampled_from(SEEDS),
    mutations=st.lists(_mutation, min_size=1, max_size=4),
    container=st.sampled_from(("raw", "raw", "raw", "gz", "run")),
    accel=st.booleans(),
)
def test_mutated_xspace_fails_cleanly_or_succeeds(fuzz_dir, seed, mutations, container, accel):
    data = xsmut.apply(seed_bytes(seed), mutations)
    for old in fuzz_dir.iterdir():
        if old.is_dir():
            for f in old.iterdir():
                f.unlink()
            old.rmdir()
        else:
            old.unlink()
    if container == "gz":
        path = fuzz_dir / "h0.xplane.pb.gz"
        path.write_bytes(gzip.compress(data, compresslevel=1, mtime=0))
    elif container == "run":  # one mutated host next to a clean one
        run = fuzz_dir / "run"
        run.mkdir()
        (run / "h0.xplane.pb").write_bytes(data)
        (run / "h1.xplane.pb").write_bytes(seed_bytes("hand_built"))
        path = run
    else:
        path = fuzz_dir / "h0.xplane.pb"
        path.write_bytes(data)
    try:
        run_pipeline(path, accel=accel)
        event("outcome: analysed")
    except InputError as e:
        msg = str(e)
        assert msg and "\n" not in msg
        event(f"outcome: InputError ({_kind(msg)})")


_KINDS = (
    ("gzip", "gzip"),
    ("truncated or corrupt", "XSpace framing"),
    ("not an XSpace", "XSpace framing"),
    ("text conversion", "text-mangled"),
    ("plane at byte", "plane decode"),
    ("line at byte", "line decode"),
    ("negative duration", "negative duration"),
    ("out of range", "time out of range"),
    ("timestamp_ns", "line timestamps"),
    ("no TPU device planes", "no TPU planes"),
    ("nothing to attribute", "nothing to attribute"),
    ("away from", "host timestamps"),
)


def _kind(msg: str) -> str:
    return next((k for needle, k in _KINDS if needle in msg), "other")
