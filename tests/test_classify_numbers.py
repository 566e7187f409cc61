"""A family is classified once (issue #24): instruction numbers do not decide a verdict.

`classify_columns` classifies the first member of an op family (the op's identity with every
`.<digits>` erased) and gives the other members that verdict: as it is when the reason quoted none
of the op's numbered strings (`Op.quote` notes them), with each member's own name quoted when it
quoted only the op's name, else it classifies each member. That rests on a property of the rules:
nothing a rule decides from depends on the numbers except what it quotes. Nothing checks that at run
time; these tests do, on every op of every sample trace and both real captures, against numbered
variants of each op (numbers erased to `.0`, all `.7`, and consistently renumbered with 1 to 10
digits, the way unrolled layers and recompiled programs number their clones)."""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from pathlib import Path

import pytest
import realcap

import profanalyzer.classify as C
from profanalyzer.classify import Memo, classify_columns, classify_op
from profanalyzer.classify.parse import NUMBER, Features, Op, as_text, clip, op_names
from profanalyzer.classify.tables import MAX_FIELD, MAX_TEXT
from profanalyzer.read.xspace.build import load_trace

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_traces"
FILES = sorted(SAMPLES.glob("*.xplane.pb.gz"))
_INSTR_NUMBER = re.compile(r"(?<![\w.\-])(%?[A-Za-z_][\w\-]*)\.(\d+)")


def _ops(path: Path) -> list[tuple[str, str, str, str, str]]:
    """The distinct op identities of a trace's TensorCores (as classification reads them)."""
    trace = load_trace(str(path))
    out: dict[tuple, None] = {}
    for p in trace.tensorcores:
        md = p.meta
        for row in zip(md.name, md.display_name, md.category, md.tf_op, md.shape_with_layout, strict=True):
            out[tuple(as_text(v, MAX_TEXT if i == 0 else MAX_FIELD) for i, v in enumerate(row))] = None
    return list(out)


def _variants(text: str, disp: str) -> list[tuple[str, str]]:
    """Members of the op's family: numbers erased, all `.7`, renumbered consistently with 1..10 digits."""
    out = [(NUMBER.sub(".0", text), NUMBER.sub(".0", disp)), (NUMBER.sub(".7", text), NUMBER.sub(".7", disp))]
    for k, width in enumerate((1, 3, 6, 10), start=1):
        def sub(s: str, k: int = k, width: int = width) -> str:
            return _INSTR_NUMBER.sub(lambda m: f"{m.group(1)}.{(int(m.group(2)) * 7919 + k) % 10 ** width:0{width}d}", s)
        out.append((sub(text), sub(disp)))
    return [(t, d) for t, d in out if NUMBER.sub(".0", t) == NUMBER.sub(".0", text)
            and NUMBER.sub(".0", d) == NUMBER.sub(".0", disp)]  # same family only


def _check_numbers_do_not_decide(ops: list[tuple[str, str, str, str, str]]) -> dict[str, int]:
    kinds = {"shared": 0, "quoting": 0, "by_member": 0}
    for text, disp, *rest in ops:
        op = Op(text, disp, *rest)
        v = C._classify(op)
        assert v == classify_op(text, disp, *rest)
        numbered = list(op.numbered)
        names = op.names
        quoting = next((i for i, n in enumerate(names) if numbered and all(q == n for q in numbered)), None)
        for t2, d2 in _variants(text, disp):
            w = classify_op(t2, d2, *rest)
            # every field but the reason: independent of the numbers, whatever the reason quotes
            assert replace(w, reason="") == replace(v, reason=""), (text[:120], t2[:120])
            if not numbered:  # the reason quotes nothing numbered: the same verdict
                assert w == v, (text[:120], t2[:120])
            elif quoting is not None and v.reason.count(clip(names[quoting])) == 1 \
                    and len(op_names(t2, d2)) == len(names):
                want = v.reason.replace(clip(names[quoting]), clip(op_names(t2, d2)[quoting]))
                assert w.reason == want, (text[:120], t2[:120])
        kinds["shared" if not numbered else "quoting" if quoting is not None else "by_member"] += 1
    return kinds


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name.split(".")[0])
def test_numbers_do_not_decide_on_samples(path):
    kinds = _check_numbers_do_not_decide(_ops(path))
    assert kinds["shared"] > 0


@pytest.mark.parametrize("name", [realcap.VLLM, realcap.V6E])
def test_numbers_do_not_decide_on_real_captures(name):
    kinds = _check_numbers_do_not_decide(_ops(realcap.real_path(name)))
    assert kinds["shared"] > 0


def test_the_three_kinds_of_family_occur():
    """The samples hold families of each kind: shared verdicts, quoted names and per-member ones
    (a reason quoting an operand or a calls= target), so the checks above cover all three paths."""
    total = {"shared": 0, "quoting": 0, "by_member": 0}
    for path in FILES:
        for k, n in _check_numbers_do_not_decide(_ops(path)).items():
            total[k] += n
    assert all(n > 0 for n in total.values()), total


_VIEW = Features()


def _family(r: tuple) -> tuple:
    """An op's family as classify_codes forms it: numbers erased, the name stack as the rules see it."""
    return (NUMBER.sub(".0", r[0]), NUMBER.sub(".0", r[1]), r[2], _VIEW.tf_view(r[3]), r[4])


def _count_classifications(monkeypatch) -> list[int]:
    calls = [0]
    real = C._classify

    def counted(op):
        calls[0] += 1
        return real(op)

    monkeypatch.setattr(C, "_classify", counted)
    return calls


def _classified_once(rows: list[tuple], monkeypatch):
    """classify_columns over `rows` with a fresh memo: one classification per family (`_family`) plus
    one per further member of the families classified member by member, and every row as classify_op
    gives it. Returns (columns, memo, the classification counter, families)."""
    cols = {c: [r[j] for r in rows] for j, c in enumerate(C._IN_COLUMNS)}
    want = [classify_op(*r) for r in rows]
    calls = _count_classifications(monkeypatch)
    memo = Memo()
    got = classify_columns(cols, memo=memo)
    families: dict[tuple, list] = {}
    for r in rows:
        families.setdefault(_family(r), []).append(r)
    per_member = sum(len(m) - 1 for k, m in families.items() if memo.families[k] is C._BY_MEMBER)
    assert calls[0] == len(families) + per_member
    for i, w in enumerate(want):
        assert got["reason"][i] == w.reason and got["bucket"][i] == w.bucket and got["phase"][i] == w.phase
    return cols, memo, calls, families


def test_a_family_is_classified_once(monkeypatch):
    """A table of clones (each op five times, renumbered): one classification per family that shares
    its verdict or quotes only its name, one per member for the others; rows equal classify_op."""
    base = _ops(SAMPLES / "dense_short_fsdp.xplane.pb.gz")
    rows = [(t2, d2, *rest) for text, disp, *rest in base for t2, d2 in [(text, disp)] + _variants(text, disp)[2:]]
    rows = list(dict.fromkeys(rows))
    cols, memo, calls, families = _classified_once(rows, monkeypatch)
    assert len(families) < len(rows)
    calls[0] = 0
    classify_columns(cols, memo=memo)  # the same rows again: nothing classified
    assert calls[0] == 0


def _full_view_verdicts(ops: list[tuple]) -> int:
    """Each op classified as the rules see its name stack (`Op.tf`, its `rules_view`) and with the
    whole stack in its place: the same verdict. Returns how many stacks the view cut."""
    f = Features()
    cut = 0
    for text, disp, cat, tf, swl in ops:
        op = Op(text, disp, cat, tf, swl, f)
        full = Op(text, disp, cat, tf, swl, f)
        full.tf = f.tf_op(tf)
        cut += op.tf != full.tf
        assert C._classify(full) == C._classify(op), (text[:100], tf[:100])
    return cut


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name.split(".")[0])
def test_the_rules_read_the_name_stack_through_its_view_on_samples(path):
    """What lets name stacks that differ only in tokens no rule reads (`layers_3/...`, `layers_4/...`)
    share a family: the rules give every op the verdict they give it on its whole name stack."""
    ops = _ops(path)
    cut = _full_view_verdicts(ops)
    assert cut > 0 or not any(o[3] for o in ops)


@pytest.mark.parametrize("name", [realcap.VLLM, realcap.V6E])
def test_the_rules_read_the_name_stack_through_its_view_on_real_captures(name):
    _full_view_verdicts(_ops(realcap.real_path(name)))


_GOLDEN = ROOT.parent / "shared" / "reference" / "xprof-golden-v5p-hlo_stats.json.gz"


@pytest.mark.skipif(not _GOLDEN.exists(), reason=f"reference file not present: {_GOLDEN}")
def test_the_rules_read_the_name_stack_through_its_view_on_the_xprof_golden_table():
    """The ops of XProf's own table of a real v5p MaxText run (their real name stacks)."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("check_golden", ROOT / "tools" / "check_golden.py")
    assert spec is not None and spec.loader is not None
    cg = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = cg  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(cg)
    rows = cg.load_golden(_GOLDEN)
    assert len(rows) > 300
    assert _full_view_verdicts([(r.text, r.name, r.category, r.tf_op, "") for r in rows]) > 0


#: Name-stack tokens that rules read: kernel families, the Pallas call, a dot as the last primitive,
#: attention, softmax and optimizer scopes, phase and remat markers, plus plain layer scopes.
_TOKENS = ("gmm", "tgmm", "quantized_matmul", "pallas_call", "dot_general", "matmul", "layers_3", "layers_12",
           "self_attention", "AttentionOp_0", "query", "softmax", "exp", "optimizer", "adam", "transpose(jvp(main))",
           "jvp(main)", "rematted_computation", "checkpoint", "mlp", "wi_0", "ragged_paged_attention", "splash_mha")


def test_the_rules_read_the_name_stack_through_its_view_on_mixed_stacks():
    """Every sample op under name stacks built from the tokens the rules read, in random orders."""
    import random

    rng = random.Random(24)
    base = _ops(SAMPLES / "dense_short_fsdp.xplane.pb.gz") + _ops(SAMPLES / "moe_short_fsdp_ep.xplane.pb.gz") + _ops(SAMPLES / "pallas_kernel_counters.xplane.pb.gz") \
        + [o for o in _ops(SAMPLES / "moe_large_pp.xplane.pb.gz") if "collective-permute" in o[0]]
    ops = []
    for text, disp, cat, _, swl in base:
        for _ in range(3):
            tf = "/".join(rng.choice(_TOKENS) for _ in range(rng.randint(1, 7)))
            ops.append((text, disp, cat, "jit(train_step)/" + tf, swl))
    assert _full_view_verdicts(ops) > len(ops) // 2


def test_layers_unrolled_with_their_own_scopes_are_one_family(monkeypatch):
    """Clones of every op of a sample under numbered layer scopes (`/layers/` -> `/layers_<k>/`, a model
    unrolled without a scan): one classification per family, not per layer; rows equal classify_op."""
    base = _ops(SAMPLES / "dense_short_fsdp.xplane.pb.gz")
    scoped = [o for o in base if "/layers/" in o[3]]
    assert scoped
    rows = [(t, d, c, tf.replace("/layers/", f"/layers_{k}/", 1), s) for t, d, c, tf, s in scoped for k in range(6)]
    _, _, _, families = _classified_once(rows, monkeypatch)
    assert len(families) <= len(scoped) < len(rows)


def test_quoting_member_with_another_number_of_names():
    """A member whose display name differs from its instruction name by a number only is in the family
    of one whose names are equal, but goes by two names: it is classified on its own, as classify_op."""
    def row(name: str, disp: str) -> tuple:
        return (f"%{name} = bf16[8,128]{{1,0}} call-start(bf16[8,128]{{1,0}} %p.1)", disp, "async-start", "", "")

    rows = [row("all-gather.3.cloned.1.call-start", "all-gather.3.cloned.1.call-start"),
            row("all-gather.4.cloned.1.call-start", "all-gather.5.cloned.1.call-start"),
            row("all-gather.60.cloned.1.call-start", "all-gather.60.cloned.1.call-start")]
    cols = {c: [r[j] for r in rows] for j, c in enumerate(C._IN_COLUMNS)}
    got = classify_columns(cols)
    for i, r in enumerate(rows):
        assert got["reason"][i] == classify_op(*r).reason


def test_no_cache_outside_the_run():
    """classify_op without a memo classifies afresh each call (no hidden cache), with one it reuses."""
    args = ("%fusion.3 = bf16[8,128]{1,0} fusion(bf16[8,128]{1,0} %p.1), kind=kLoop", "fusion.3", "loop fusion")
    a, b = classify_op(*args), classify_op(*args)
    assert a == b and a is not b
    memo = Memo()
    assert classify_op(*args, memo=memo) is classify_op(*args, memo=memo)
    assert len(memo.ops) == 1 and len(memo.verdicts) == 1


_CACHE_DECORATORS = {"lru_cache", "cache", "cached_property"}


def _module_caches(path: Path) -> list[str]:
    """functools cache decorators and module-level WeakKeyDictionary / cache-named dicts in a module."""
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for d in node.decorator_list:
                f = d.func if isinstance(d, ast.Call) else d
                name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
                if name in _CACHE_DECORATORS:
                    found.append(f"{path.name}:{node.lineno} @{name}")
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Call):
            f = node.value.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if name in ("WeakKeyDictionary", "WeakValueDictionary"):
                found.append(f"{path.name}:{node.lineno} {name}")
    return found


def test_no_module_global_cache_on_the_classify_and_analysis_path():
    files = sorted((ROOT / "profanalyzer" / "classify").glob("*.py")) + sorted(
        (ROOT / "profanalyzer" / "analyze").glob("*.py")) + [ROOT / "profanalyzer" / "model" / "records.py"]
    assert len(files) > 20
    found = [c for p in files for c in _module_caches(p)]
    assert found == []


def test_the_cache_scan_finds_what_it_claims(tmp_path):
    p = tmp_path / "m.py"
    p.write_text("import functools, weakref\n@functools.lru_cache(maxsize=8)\ndef f(x):\n    return x\n"
                 "@functools.cache\ndef g(x):\n    return x\nW = weakref.WeakKeyDictionary()\n")
    assert len(_module_caches(p)) == 3


def test_one_memo_per_run():
    """run() makes the run's classify memo; every core's classes and the later stages use that one."""
    from profanalyzer.pipeline.run import run

    r1 = run(SAMPLES / "dense_short_fsdp.xplane.pb.gz")
    r2 = run(SAMPLES / "dense_short_fsdp.xplane.pb.gz")
    att = r1.attributed
    assert att is not None and r2.attributed is not None
    assert isinstance(att.classify, Memo) and att.classify is not r2.attributed.classify
    assert att.work and all(w.classes.memo is att.classify for w in att.work)
    assert len(att.classify.ops) > 0
