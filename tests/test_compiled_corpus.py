"""The real-compiler corpus (sample_traces/compiled/, tools/compile_corpus.py)
is complete and consistent, read without jax: manifest, every listed file,
the HloProtos decoded field by field, the compiler's memory and cost analysis,
and what each program is said to show against its own optimized HLO."""

from __future__ import annotations

import gzip
import json
import re

import pytest
from conftest import ROOT

from profanalyzer.read.xspace.wire import iter_fields

CORPUS = ROOT / "sample_traces" / "compiled"
MANIFEST = json.loads((CORPUS / "manifest.json").read_text())
PROGRAMS = MANIFEST["programs"]
BY_NAME = {p["name"]: p for p in PROGRAMS}
MEMORY_FIELDS = (
    "argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes", "temp_size_in_bytes",
    "generated_code_size_in_bytes", "host_argument_size_in_bytes", "host_output_size_in_bytes",
    "host_alias_size_in_bytes", "host_temp_size_in_bytes", "host_generated_code_size_in_bytes",
)
SC_OFFLOAD_FLAG = re.compile(r"--xla_tpu_enable_sparse_core_collective_offload_(all_gather|reduce_scatter|all_reduce)=false")
MAX_FILE = 1 << 20  # 1 MiB compressed per file
MAX_CORPUS = 5 << 20


def _gz(name: str) -> bytes:
    return gzip.decompress((CORPUS / name).read_bytes())


def _fields(buf: bytes, start: int = 0, end: int | None = None) -> list[tuple[int, int, int | None, int, int]]:
    """(field, wire, varint, payload start, payload end) of every field; the
    whole range must decode (iter_fields raises on a malformed message)."""
    return [(f, w, v, s, e) for f, w, v, s, e, _ in iter_fields(buf, start, len(buf) if end is None else end)]


def _string(buf: bytes, fields, number: int) -> str:
    vals = [buf[s:e].decode() for f, w, _, s, e in fields if f == number and w == 2]
    assert len(vals) == 1, f"field {number}: {len(vals)} values"
    return vals[0]


def _text(p: dict) -> str:
    return _gz(p["files"]["hlo_text"]).decode()


def _compiler(p: dict) -> dict:
    return json.loads((CORPUS / p["files"]["compiler"]).read_text())


def mesh_size(mesh: list[dict]) -> int:
    n = 1
    for axis in mesh:
        n *= axis["size"]
    return n


def test_manifest_lists_versions_command_and_programs():
    v = MANIFEST["versions"]
    assert set(v) >= {"jax", "jaxlib", "libtpu", "python"} and all(v.values())
    assert "tools/compile_corpus.py" in MANIFEST["command"] and (ROOT / "tools" / "compile_corpus.py").exists()
    assert MANIFEST["environment"]["TPU_ACCELERATOR_TYPE"]
    assert len(PROGRAMS) == len(BY_NAME) >= 10
    for p in PROGRAMS:
        assert p["topology"] and p["device_kind"] and p["module_name"] and p["shows"], p["name"]
        assert p["devices"] == mesh_size(p["mesh"]), p["name"]
        assert p["libtpu_init_args"] == " ".join(p["flags"])
        assert p["config"], p["name"]


def test_corpus_was_compiled_by_the_committed_tool():
    # The tool's source lines are in every program's metadata: a corpus
    # compiled by another version of it is stale.
    import hashlib

    sha = hashlib.sha256((ROOT / "tools" / "compile_corpus.py").read_bytes()).hexdigest()
    stale = [p["name"] for p in PROGRAMS if p.get("tool_sha256") != sha]
    assert not stale, f"compiled by another tools/compile_corpus.py: {stale}; rerun {MANIFEST['command']}"


def test_every_file_listed_is_present_and_nothing_else_is_there():
    listed = {"manifest.json", "README.md", MANIFEST["flagfile"]}
    for p in PROGRAMS:
        assert set(p["files"]) == {"hlo_proto", "hlo_proto_after_codegen", "hlo_text", "compiler"}, p["name"]
        listed |= set(p["files"].values())
    present = {f.name for f in CORPUS.iterdir()}
    assert present == listed, f"missing {sorted(listed - present)}, unlisted {sorted(present - listed)}"
    sizes = {f.name: f.stat().st_size for f in CORPUS.iterdir()}
    assert all(200 < s < MAX_FILE for s in sizes.values()), {k: s for k, s in sizes.items() if not 200 < s < MAX_FILE}
    assert sum(sizes.values()) < MAX_CORPUS


def test_readme_table_has_every_program():
    readme = (CORPUS / "README.md").read_text()
    rows = {m.group(1) for m in re.finditer(r"^\| `([a-z0-9_]+)` \|", readme, re.M)}
    assert rows == set(BY_NAME)


@pytest.mark.parametrize("p", PROGRAMS, ids=lambda p: p["name"])
def test_compiler_json_has_memory_and_cost_analysis(p):
    doc = _compiler(p)
    assert doc["program"] == p["name"] and doc["module_name"] == p["module_name"]
    mem = doc["memory_analysis"]
    assert set(mem) == set(MEMORY_FIELDS), sorted(set(MEMORY_FIELDS) ^ set(mem))
    assert all(isinstance(v, int) and v >= 0 for v in mem.values())
    assert mem["argument_size_in_bytes"] > 0 and mem["generated_code_size_in_bytes"] > 0
    assert mem["alias_size_in_bytes"] <= min(mem["argument_size_in_bytes"], mem["output_size_in_bytes"])
    cost = doc["cost_analysis"]
    assert cost["flops"] > 0 and cost["bytes accessed"] > 0


@pytest.mark.parametrize("p", PROGRAMS, ids=lambda p: p["name"])
def test_hlo_proto_decodes_with_its_buffer_assignment(p):
    buf = _gz(p["files"]["hlo_proto"])
    top = _fields(buf)
    # HloProto: 1 hlo_module (HloModuleProto), 3 buffer_assignment (BufferAssignmentProto)
    assert sorted(f for f, *_ in top) == [1, 3] and all(w == 2 for _, w, *_ in top)
    (_, _, _, ms, me), = [t for t in top if t[0] == 1]
    module = _fields(buf, ms, me)
    assert _string(buf, module, 1) == p["module_name"]  # HloModuleProto.name
    assert _string(buf, module, 2)  # entry_computation_name
    assert sum(1 for f, *_ in module if f == 3) > 1  # computations
    (_, _, _, bs, be), = [t for t in top if t[0] == 3]
    allocations = [_fields(buf, s, e) for f, w, _, s, e in _fields(buf, bs, be) if f == 3]
    assert allocations
    # BufferAllocationProto: 2 size, 5 is_entry_computation_parameter. The
    # parameters' allocations are the compiler's argument bytes (device + host).
    params = sum(next((v for f, _, v, *_ in a if f == 2), 0) for a in allocations
                 if any(f == 5 and v for f, _, v, *_ in a))
    mem = _compiler(p)["memory_analysis"]
    assert params == mem["argument_size_in_bytes"] + mem["host_argument_size_in_bytes"]


@pytest.mark.parametrize("p", PROGRAMS, ids=lambda p: p["name"])
def test_after_codegen_proto_and_text_are_the_final_scheduled_module(p):
    buf = _gz(p["files"]["hlo_proto_after_codegen"])
    top = _fields(buf)
    assert [f for f, *_ in top] == [1]
    module = _fields(buf, top[0][3], top[0][4])
    assert _string(buf, module, 1) == p["module_name"]
    text = _text(p)
    assert text.startswith(f"HloModule {p['module_name']}, is_scheduled=true")
    assert re.search(r'"estimated_cycles":"\d+"', text), "fusions carry the compiler's estimate"
    assert re.search(r" while\(", text), "the layers are a while loop (lax.scan)"


def _sparsecore_lines(text: str) -> int:
    return text.count('async_execution_thread="sparsecore"')


@pytest.mark.parametrize("p", PROGRAMS, ids=lambda p: p["name"])
def test_programs_show_what_the_manifest_says(p):
    text = _text(p)
    mem = _compiler(p)["memory_analysis"]
    if any(SC_OFFLOAD_FLAG.fullmatch(f) for f in p["flags"]):
        assert _sparsecore_lines(text) == 0, "offload flags off: no SparseCore thread"
    if p["dot"] == "fp8":
        assert {"f8e4m3fn", "f8e5m2"} <= set(re.findall(r"\b(f8e[0-9a-z]+)\[", text))
    else:
        assert not re.search(r"\bf8e[0-9a-z]+\[", text)
    if p["model"] == "moe":
        assert re.search(r" all-to-all(-start)?\(", text)
    if p["model"] == "cp_splash":
        assert 'custom_call_target="tpu_custom_call"' in text, "the splash attention kernel"
    if p["remat"] == "host_offload":
        assert mem["host_temp_size_in_bytes"] > 0 and "S(5)" in text, "activations in host memory"


def _twins(key: str):
    """Programs that differ from another only in `key` (same model, topology, mesh, config)."""
    groups: dict[str, list[dict]] = {}
    for p in PROGRAMS:
        ident = json.dumps({k: p[k] for k in ("model", "topology", "mesh", "config", "remat", "dot", "flags") if k != key}, sort_keys=True)
        groups.setdefault(ident, []).append(p)
    return [g for g in groups.values() if len({json.dumps(p[key]) for p in g}) > 1]


def test_sparsecore_offload_default_vs_off():
    pairs = _twins("flags")
    off = [(p, q) for g in pairs for p in g for q in g if not p["flags"] and any(SC_OFFLOAD_FLAG.fullmatch(f) for f in q["flags"])]
    assert off, "a default / offload-off pair"
    for default, no_offload in off:
        t = _text(default)
        assert _sparsecore_lines(t) > 0 and re.search(r"all-gather\.\d+\.cloned\.1\.call-start", t)
        assert "DEVICE_TYPE_SPARSECORE" in t
        assert _sparsecore_lines(_text(no_offload)) == 0 and "DEVICE_TYPE_SPARSECORE" not in _text(no_offload)


def test_remat_policies_trade_memory_for_flops():
    groups = [g for g in _twins("remat") if {"none", "full", "dots_saveable"} <= {p["remat"] for p in g}]
    assert groups, "remat none / dots_saveable / full of one model"
    for g in groups:
        by = {p["remat"]: _compiler(p) for p in g}
        temp = {k: d["memory_analysis"]["temp_size_in_bytes"] for k, d in by.items()}
        flops = {k: d["cost_analysis"]["flops"] for k, d in by.items()}
        assert temp["full"] < temp["dots_saveable"] < temp["none"], temp
        assert flops["none"] < flops["full"], flops
        assert _text(next(p for p in g if p["remat"] == "full")).count("rematted_computation") > 0


def test_fp8_twin_needs_less_memory():
    groups = [g for g in _twins("dot") if {"fp8", "bf16"} == {p["dot"] for p in g}]
    assert groups, "an fp8 / bf16 pair"
    for g in groups:
        temp = {p["dot"]: _compiler(p)["memory_analysis"]["temp_size_in_bytes"] for p in g}
        assert temp["fp8"] < temp["bf16"], temp


def test_topologies_and_device_kinds():
    kinds = {p["topology"].split(":")[0]: p["device_kind"] for p in PROGRAMS}
    assert kinds.get("tpu7x") == "TPU7x"
    assert {"v6e", "v5p"} <= set(kinds)
    for p in PROGRAMS:
        if p["device_kind"] != "TPU7x":
            assert _sparsecore_lines(_text(p)) == 0, f"{p['name']}: SparseCore offload only on TPU7x here"


def test_flagfile_is_libtpus_and_holds_the_programs_flags():
    text = _gz(MANIFEST["flagfile"]).decode()
    flags = dict(line[2:].split("=", 1) for line in text.splitlines() if line.startswith("--") and "=" in line)
    assert len(flags) > 500
    for p in PROGRAMS:
        for f in p["flags"]:
            assert f[2:].split("=", 1)[0] in flags, f
    # the flagfile is of the default-flags program: offload on "auto"
    assert BY_NAME[MANIFEST["flagfile_of"]]["flags"] == []
    assert flags["xla_tpu_enable_sparse_core_collective_offload_all_gather"] == "auto"


def test_corpus_covers_the_programs_of_the_issue():
    texts = {p["name"]: _text(p) for p in PROGRAMS}

    def some(pattern: str) -> list[str]:
        return [n for n, t in texts.items() if re.search(pattern, t)]

    assert some(r" all-to-all(-start)?\("), "expert parallelism: all-to-all"
    assert some(r"windowed_dot_general_body_ag") and some(r" collective-permute(-start)?\("), "a collective matmul ring"
    assert some(r'custom_call_target="tpu_custom_call"'), "a Pallas kernel"
    assert some(r'async_execution_thread="sparsecore"'), "SparseCore offload"
    assert {p["remat"] for p in PROGRAMS} >= {"none", "full", "dots_saveable", "host_offload"}
    assert any("scoped_vmem" in f for p in PROGRAMS for f in p["flags"])
    assert any(p["model"] == "decode" for p in PROGRAMS)
