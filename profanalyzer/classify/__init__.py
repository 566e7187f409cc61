"""Op classifier: every TensorCore op -> one exclusive time bucket.

Input is the op identity XProf stores on an ``XLA Ops`` event's metadata:
the full HLO text (metadata ``name``), the instruction name
(``display_name``), the compiler's ``hlo_category`` stat, the framework
``tf_op`` name stack and ``shape_with_layout``. All of these are untrusted
strings: any of them may be empty, truncated or hostile, and the classifier
never raises on them.

How a decision is made
----------------------
1. The op is parsed once (``parse.Op``): instruction name (before ``=`` in the HLO
   text, else the display name), opcode (the first ``word(`` after the output
   shape; from the display name when the text is cut before it), the operand
   region (everything after the opcode's ``(``), and the name-stack tokens of
   ``tf_op``.
2. The ordered rules in ``RULES`` are tried top to bottom; the first that
   matches decides ``bucket``, ``collective``, ``role``, ``kernel`` and
   ``precision`` and writes ``reason`` (prefixed with the rule's name). Each
   rule is driven by a named regex table below (``COLLECTIVE_KINDS``,
   ``ATTENTION_KERNELS``, ``MATMUL_CATEGORIES``, ...). Collectives and async
   copies come first (an op *is* communication regardless of the model scope
   it was emitted for), then attention kernels, then matmul kernels, then the
   attention name-stack scope, then matmuls, then other Pallas kernels.
   Anything left is ``other_compute``.
3. ``remat`` and ``phase`` are orthogonal tags from their own tables.

Documented choices
------------------
* Matmul precision (``parse.matmul_precision``) looks at *operand* element types
  (HLO prints the output type first: ``%f = bf16[..] fusion(f8e4m3fn[..] %a,
  ..)``): any f8 type -> ``fp8``; else the first of int8 (s8/u8/s4/u4), bf16,
  f32 that appears as a *matrix-like* operand (>= 2 dimensions larger than 1)
  -- so 1-D norm scales, scalars, index and sync-flag operands (s32/u32) do
  not decide; else the same over all operands; when the text is cut before
  the operands, the output type(s) in the text or ``shape_with_layout`` decide.
  fp8 -> ``matmul_fp8``, bf16 -> ``matmul_bf16``, anything else (f32, int8,
  f16, unknown) -> ``matmul_other``.
* Attention (``attention.*`` rules): Pallas attention kernels (splash, flash,
  ragged paged attention) by name; plus every op under an attention *core*
  name-stack scope (MaxText ``AttentionOp_N``, ``apply_attention*``,
  ``dot_product_attention``, ``*flash_attention``, ``*splash_attention``,
  ``splash_mha_*`` ...), whatever its opcode -- mask iotas, layout copies for
  the kernel, softmax pieces and the QK^T / PV dots exist only because of
  attention, so attention's share of the step includes them; plus, under a
  generic attention scope (a token containing ``attention``/``attn``, e.g.
  ``self_attention``, ``MultiHeadDotProductAttention_0``), the matmuls and
  softmax-like ops (exp, max/sum reductions, softmax) that are not inside a
  projection/rotary/norm sub-scope (``query``, ``key``, ``value``, ``out``,
  ``*_proj``, ``*_projection``, ``*rotary*``, ``*norm*``...). Tokens like
  ``pre_self_attention_layer_norm`` are norms, not attention.
* Custom kernels are what they compute (rule ``matmul.kernel``, one rule for
  every matmul kernel): a custom-call / Pallas call is a matmul when its
  name, a ``tf_op`` scope token, its custom-call attributes or its
  ``kernel_metadata`` (``xprof_metadata`` JSON) name a matmul (matmul, gemm,
  mm, dot, gmm/tgmm, quantized names), or when its operand and output shapes
  form one ([.., M, K] x [K, N] -> [.., M, N], K a weight dimension; never
  when every matrix operand has the output's shape: elementwise). Operand
  types come from the typed operand list, else the operand layout
  constraints (an optimized module prints bare operand names). The family:
  ``megablox_gmm`` (gmm/tgmm), ``quantized_matmul`` (quantized names or
  low-bit operands), else ``pallas_matmul``; FLOPs 2*M*N*K from the shapes
  (``shape_flops``), the evidence in the reason. A ``tpu_custom_call`` none
  of these decide stays ``other_compute`` here; hardware counters, read after
  classification, may move it (``counters.counter_matmul_rows``: MXU busy at
  least ``MXU_MATMUL`` -> a matmul, re-bucketed before attribution, reason
  ``[counters.mxu]``). An op *named* gmm/tgmm is a
  matmul even without its text; helper ops under a ``jit(gmm)`` scope stay
  ``other_compute`` because the matmul buckets measure MXU ops, while the
  attention bucket measures attention as a feature. A kernel whose metadata
  holds query and key/value block sizes (``block_q``, ``block_kv``) is an
  attention kernel whatever its name.
* ``async-collective-start/-done`` (continuation fusions, category ``custom
  fusion``) carry no kind in their text; it is inferred from the two buffers
  the fusion threads through: output tuple (start) or operands (done) begin
  with (shard, full) -> bigger second buffer = all-gather, smaller =
  reduce-scatter, equal = all-reduce (the three kinds continuation fusion
  handles). When that is impossible (truncated text), ``collective`` is None,
  bucket ``other_collective``, and attribution pairs the done with its start.
* ``copy-start``/``copy-done`` are async memory copies (HBM<->host/VMEM), not
  collectives: ``other_compute``.
* ``remat``: instruction or display name contains ``.remat`` (XLA remat pass:
  ``fusion.12.remat``, ``copy.3.remat2``) or ``tf_op`` has a
  ``rematted_computation`` scope (``jax.checkpoint``). ``checkpoint/`` alone is
  not remat (the forward pass of a checkpointed layer), as XProf agrees.
* ``phase``: ``transpose(jvp(`` -> backward, ``jvp(`` -> forward, an optimizer
  scope token (``optimizer``, ``optax``, ``adam*``, ``scale_by_*``,
  ``apply_gradients``, a bare ``update`` segment, ...) -> optimizer, else None.
  Optimizer math without such a scope (MaxText's Adam update shows as
  ``jit(train_step)/jit(main)/reduce_sum``) gets None.
* Collective kinds: sync ops -> role ``sync``; ``-start``/``-done`` ops and
  ``async-start``/``async-done`` wrappers -> ``start``/``done`` (an
  ``async-update`` counts as ``start``); an async wrapper whose ``calls=``
  target is plain compute (custom-call, fusion, copy) is ``other_compute``.
  collective-permute and collective-broadcast -> ``collective_permute``;
  send/recv -> ``send_recv`` (``host_transfer`` when
  ``is_host_transfer=true``); infeed/outfeed -> ``host_transfer``; these all
  land in ``other_collective``. Operand names (``%all-gather.276`` feeding a
  matmul) never decide anything.
* v5p ``megacore fusion`` ops carry no kind in their text and stay
  ``other_compute`` (TPU7x has no megacore). XProf's synthetic ``IDLE`` op is
  ``other_compute`` too: the ``idle`` bucket is computed by attribution from
  gaps, never returned here.
* ``reason`` quotes input only through ``parse.clip`` (short, printable ASCII,
  markup and ``|`` replaced), so it is safe to render.

Checked against XProf's own per-op table of a real v5p MaxText run by
``tools/check_golden.py`` (see tests/test_classify.py for the numbers).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from profanalyzer.classify.parse import (
    NUMBER,
    Features,
    Op,
    as_text,
    clip,
    op_names,
    opcode_end,
)
from profanalyzer.classify.parse import matmul_kernel_flops as matmul_kernel_flops
from profanalyzer.classify.rules import RULES, Rule, Verdict, op_phase, op_remat
from profanalyzer.classify.tables import (
    ATTENTION_KERNELS as ATTENTION_KERNELS,
)
from profanalyzer.classify.tables import (
    ATTENTION_PARTS as ATTENTION_PARTS,
)
from profanalyzer.classify.tables import (
    COLLECTIVE_FUSION_CATEGORIES as COLLECTIVE_FUSION_CATEGORIES,
)
from profanalyzer.classify.tables import (
    COLLECTIVE_KINDS as COLLECTIVE_KINDS,
)
from profanalyzer.classify.tables import (
    COLLECTIVES,
    DONE_OPERAND,
    KERNELS,
    MAX_FIELD,
    MAX_TEXT,
    PAIR_CALL,
    PAIR_GENERIC,
    PAIR_SENDRECV,
    PRECISIONS,
    ROLES,
)
from profanalyzer.classify.tables import (
    MATMUL_CATEGORIES as MATMUL_CATEGORIES,
)
from profanalyzer.classify.tables import (
    MATMUL_OPCODES as MATMUL_OPCODES,
)
from profanalyzer.core.arrays import unique_ids
from profanalyzer.core.vocab import (
    BUCKETS,
    COLLECTIVE_BUCKETS,
    COMPUTE_BUCKETS,
    MATMUL_BUCKETS,
    PHASES,
)

__all__ = [
    "BUCKETS",
    "COLLECTIVE_BUCKETS",
    "MATMUL_BUCKETS",
    "COMPUTE_BUCKETS",
    "COLLECTIVES",
    "ROLES",
    "KERNELS",
    "PRECISIONS",
    "PHASES",
    "RULES",
    "OpClass",
    "Memo",
    "Rule",
    "classify_op",
    "classify_columns",
    "classify_codes",
    "columns_of",
    "ROLE_CODES",
    "classify_table",
    "async_pair_key",
    "async_done_operand",
]


@dataclass(frozen=True)
class OpClass:
    bucket: str  # one of BUCKETS except "idle"
    collective: str | None  # one of COLLECTIVES or None
    role: str | None  # collectives only: one of ROLES
    remat: bool
    phase: str | None  # one of PHASES or None
    kernel: str | None  # one of KERNELS or None
    precision: str | None  # one of PRECISIONS or None (matmuls / attention)
    reason: str  # "[rule.name] why"
    attention_part: str | None = None  # one of ATTENTION_PARTS (attention bucket only)
    shape_flops: float | None = None  # 2*M*N*K from a matmul kernel's operand shapes
    shape_bytes: float | None = None  # a matmul kernel's operands and outputs, from its shapes


class Memo:
    """The classify path's one cache: what one run has classified, kept as
    long as the run (`analyze.attribution.attribute_trace` makes one per
    trace, `Attributed.classify` keeps it for the later stages). Nothing else
    on the classify path caches.

    * ``ops``: op identity (the five input cells) -> verdict id;
    * ``verdicts``: verdict id -> ``OpClass``, each verdict made once;
    * ``families``: op family (identity with instruction numbers erased and
      the name stack as the rules see it, `stack.rules_view`) ->
      what its members share: a verdict id, a `_Quoting`, or `_BY_MEMBER`;
    * ``features``: the per-field parse features (`parse.Features`).

    The TensorCores of a host share their op metadata, so with one memo per
    trace each op is classified once per trace, not once per core."""

    __slots__ = ("ops", "verdicts", "families", "features")

    def __init__(self) -> None:
        self.ops: dict[tuple, int] = {}
        self.verdicts: list[OpClass] = []
        self.families: dict[tuple, int | _Quoting | object] = {}
        self.features = Features()

    def add(self, verdict: OpClass) -> int:
        """A new verdict's id."""
        self.verdicts.append(verdict)
        return len(self.verdicts) - 1

    def get(self, key: tuple) -> OpClass | None:
        """The verdict of an op identity classified before, else None."""
        try:
            i = self.ops.get(key)
        except TypeError:  # an unhashable cell
            return None
        return None if i is None else self.verdicts[i]


# --------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------
def classify_op(hlo_text: str, display_name: str = "", category: str = "", tf_op: str = "",
                shape_with_layout: str = "", memo: Memo | None = None) -> OpClass:
    """Classify one op. Never raises on odd input; see the module docstring.
    `memo`: the run's (an op met before is not classified again)."""
    key = (hlo_text, display_name, category, tf_op, shape_with_layout)
    if memo is not None:
        hit = memo.get(key)
        if hit is not None:
            return hit
    out = _classify(Op(as_text(hlo_text, MAX_TEXT), as_text(display_name), as_text(category), as_text(tf_op),
                       as_text(shape_with_layout), memo.features if memo is not None else None))
    if memo is not None:
        try:
            hash(key)
        except TypeError:  # an unhashable cell: not kept
            return out
        memo.ops[key] = memo.add(out)
    return out


def _classify(op: Op) -> OpClass:
    """The first rule that matches decides; `op.numbered` is left holding the
    numbered excerpts that rule quoted."""
    verdict: Verdict | None = None
    rule_name = "default"
    for rule in RULES:
        op.numbered.clear()  # only the deciding rule's quotes count
        try:
            verdict = rule.match(op)
        except Exception as exc:  # defensive: a rule bug must not kill an analysis
            verdict = None
            rule_name = f"{rule.name}!error:{type(exc).__name__}"
            continue
        if verdict is not None:
            rule_name = rule.name
            break
    if verdict is None:  # pragma: no cover - default always matches
        verdict = Verdict("other_compute", reason="no rule matched")
    try:
        remat = op_remat(op)
        phase = op_phase(op)
    except Exception:  # pragma: no cover - defensive
        remat, phase = False, None
    return OpClass(
        bucket=verdict.bucket,
        collective=verdict.collective,
        role=verdict.role,
        remat=remat,
        phase=phase,
        kernel=verdict.kernel,
        precision=verdict.precision,
        reason=f"[{rule_name}] {verdict.reason}",
        attention_part=verdict.attention_part,
        shape_flops=verdict.shape_flops,
        shape_bytes=verdict.shape_bytes,
    )


def async_pair_key(display_name: str) -> tuple[str, str] | None:
    """Key that a start op and its done op share, and the op's role.

    ``all-gather-start.12`` / ``all-gather-done.12`` -> ``("all-gather-*.12", role)``;
    ``async-collective-start.5`` -> ``"async-collective-*.5"``;
    ``reduce-scatter.543.cloned.1.call-start`` / ``...call-done`` ->
    ``"reduce-scatter.543.cloned.1.call-*"``; ``send.1`` / ``send-done.1`` ->
    ``"send-*.1"``; ``copy-start.7`` -> ``"copy-*.7"``. The ``*`` marks the
    start/done slot, so a key never equals a real instruction name.
    Anything else (sync ops, ``-update``) -> None.
    """
    n = as_text(display_name, 1024).strip().lstrip("%")
    if not n:
        return None
    m = PAIR_CALL.match(n)
    if m:
        return f"{m.group('base')}.call-*", m.group("role").lower()
    m = PAIR_SENDRECV.match(n)
    if m:
        return f"{m.group('base').lower()}-*{m.group('suffix')}", "done" if m.group("done") else "start"
    m = PAIR_GENERIC.match(n)
    if m:
        return f"{m.group('base')}-*{m.group('suffix')}", m.group("role").lower()
    return None


def async_done_operand(hlo_text: str) -> str | None:
    """For a done op's HLO text, the start op it consumes (``copy-done(... %copy-start.50)``
    -> ``"copy-start.50"``), else None. Lets attribution pair ops whose numbering drifted."""
    text = as_text(hlo_text, MAX_TEXT)
    op_end = opcode_end(text)
    if op_end < 0:
        return None
    m = DONE_OPERAND.search(text, op_end)
    return m.group(1) if m else None


#: Integer codes of the async roles (0: none / not a collective half).
ROLE_CODES = {"start": 1, "done": 2, "sync": 3, "offload_start": 4, "offload_done": 5}

_OUT_COLUMNS = ("bucket", "collective", "role", "remat", "phase", "kernel", "precision", "reason", "attention_part",
                "shape_flops", "shape_bytes")
_IN_COLUMNS = ("hlo_text", "display_name", "category", "tf_op", "shape_with_layout")


try:  # the optional C accelerator (setup.py): the same substitution, one pass per text
    import profanalyzer.classify._canon as _canon  # type: ignore[import-not-found]  # a C extension (no stubs)
except ImportError:  # no compiler at install time: the regular expression alone
    _canon = None


def _erase_numbers(texts: list[str]) -> list[str]:
    """Each text with every ``.<digits>`` (`parse.NUMBER`) written ``.0`` (texts hold no NUL)."""
    if _canon is not None:
        out = _canon.erase_numbers(texts)
        for i in [i for i, x in enumerate(out) if x is None]:  # non-ASCII texts
            out[i] = NUMBER.sub(".0", texts[i])
        return out
    return NUMBER.sub(".0", "\x00".join(texts)).split("\x00") if texts else []


#: A family whose members' verdicts depend on their numbers beyond one quoted
#: name: its members are classified one by one.
_BY_MEMBER = object()


@dataclass(frozen=True)
class _Quoting:
    """A family whose members share one verdict except that its reason quotes
    the member's `index`-th name (``op_names``, `names` of them): `base` is
    the verdict of the family's first member, whose reason quotes `quoted`
    (its name, clipped) exactly once."""

    base: OpClass
    index: int
    names: int
    quoted: str

    def member(self, text: str, display: str) -> OpClass | None:
        """The verdict of the member with this text and display name; None
        when it goes by another number of names than the first member."""
        names = op_names(text, display)
        if len(names) != self.names:
            return None
        b = self.base
        return OpClass(b.bucket, b.collective, b.role, b.remat, b.phase, b.kernel, b.precision,
                       b.reason.replace(self.quoted, clip(names[self.index])), b.attention_part, b.shape_flops,
                       b.shape_bytes)


def _texts(values: list, cap: int) -> list[str]:
    """``as_text`` of every value; one C-level check instead when they are
    all clean strings already (the usual metadata columns)."""
    if _canon is not None:
        if _canon.clean_texts(values, cap):
            return values
    elif values and set(map(type, values)) == {str} and max(map(len, values)) <= cap and "\x00" not in "".join(values):
        return values
    return [as_text(v, cap) for v in values]


def _family_verdict(text: str, disp: str, rest: tuple[str, str, str],
                    features: Features) -> tuple[OpClass, _Quoting | object | None]:
    """(the verdict of a family's first member, what the other members take
    from it: None -- the same verdict; a `_Quoting`; or `_BY_MEMBER`).

    One classification: a verdict that quoted no numbered excerpt of the op
    (`Op.numbered`) is the whole family's, one that quoted only the op's own
    name (once) is, with each member's name quoted instead. That nothing else
    a rule decides from depends on the numbers is a property of the rules,
    checked by tests (tests/test_classify_numbers.py), not at run time."""
    category, tf_op, swl = rest
    op = Op(text, disp, category, tf_op, swl, features)
    r = _classify(op)
    if not op.numbered:
        return r, None
    for i, name in enumerate(op.names):
        if all(q == name for q in op.numbered):
            quoted = clip(name)
            if r.reason.count(quoted) == 1:
                return r, _Quoting(r, i, len(op.names), quoted)
            break
    return r, _BY_MEMBER


def classify_codes(cols: Mapping[str, Sequence], n: int | None = None,
                   memo: Memo | None = None) -> tuple[np.ndarray, list[OpClass]]:
    """Classify every row: (codes, verdicts), row i's ``OpClass`` being
    ``verdicts[codes[i]]`` (each distinct verdict once, in the order `memo`
    made them). See ``classify_columns`` for the inputs, the cost and the memo."""
    if n is None:
        n = max((len(v) for v in cols.values()), default=0)
    if memo is None:
        memo = Memo()
    inputs = [list(cols[c]) if c in cols else [""] * n for c in _IN_COLUMNS]
    rows = min(map(len, inputs))
    if any(len(c) != rows for c in inputs):  # columns of unequal length: the rows they all have
        inputs = [c[:rows] for c in inputs]
    known = memo.ops
    keys = list(zip(*inputs, strict=True))
    as_given = True  # the keys' cells are the input cells
    try:
        new = dict.fromkeys(k for k in keys if k not in known)
    except TypeError:  # an unhashable cell (list, dict): use the str forms
        keys = [tuple(as_text(v) for v in k) for k in keys]
        new = dict.fromkeys(k for k in keys if k not in known)
        as_given = False
    # Every row new and distinct (the first table of a trace): the fresh
    # keys are the rows in order, so the input columns serve as they are.
    all_fresh = as_given and len(new) == len(keys)
    made: list[int] = []  # verdict id per fresh key
    if new:
        fresh = keys if all_fresh else list(new)
        cells = inputs if all_fresh else [[k[j] for k in fresh] for j in range(len(_IN_COLUMNS))]
        fields = [_texts(c, MAX_TEXT if j == 0 else MAX_FIELD) for j, c in enumerate(cells)]
        texts, disps = fields[0], fields[1]
        # Rows by family (first seen first), each new family classified once
        # (its first row); the rows of families that share one verdict take
        # its id, only the others are made member by member.
        families, features = memo.families, memo.features
        view = features.tf_view
        index: dict[tuple, int] = {}
        fids = [index.setdefault(k, len(index))
                for k in zip(_erase_numbers(texts), _erase_numbers(disps), fields[2], map(view, fields[3]), fields[4],
                             strict=True)]
        fid_arr = np.asarray(fids, dtype=np.int64)
        firsts = unique_ids(fid_arr, return_index=True)[1].tolist()  # ids are numbered first seen first
        shared: list[int] = []  # per family: the verdict id its members share, or -1
        by_member: dict[int, object] = {}  # family -> its _Quoting or _BY_MEMBER
        own: dict[int, int] = {}  # row -> verdict id, for the first rows of new per-member families
        for f, fkey in enumerate(index):
            v = families.get(fkey)
            if v is None:
                row = firsts[f]
                r, v = _family_verdict(texts[row], disps[row], (fields[2][row], fields[3][row], fields[4][row]), features)
                rid = memo.add(r)
                if v is None:
                    v = rid
                else:
                    own[row] = rid
                families[fkey] = v
            if isinstance(v, int):
                shared.append(v)
            else:
                shared.append(-1)
                by_member[f] = v
        made = [shared[f] for f in fids]
        if by_member:
            per_member = np.zeros(len(index), dtype=bool)
            per_member[list(by_member)] = True
            for row in np.flatnonzero(per_member[fid_arr]).tolist():
                mine = own.get(row)
                if mine is None:
                    v = by_member[fids[row]]
                    oc = v.member(texts[row], disps[row]) if isinstance(v, _Quoting) else None
                    if oc is None:
                        category, tf_op, swl = (c[row] for c in fields[2:])
                        oc = _classify(Op(texts[row], disps[row], category, tf_op, swl, features))
                    mine = memo.add(oc)
                made[row] = mine
        known.update(zip(fresh, made, strict=True))
    ids = made if all_fresh else [known[k] for k in keys]
    uniq, codes = unique_ids(np.asarray(ids, dtype=np.int64), return_inverse=True)
    verdicts = memo.verdicts
    return codes.reshape(-1), [verdicts[i] for i in uniq.tolist()]


def classify_columns(cols: Mapping[str, Sequence], n: int | None = None,
                     memo: Memo | None = None) -> dict[str, np.ndarray]:
    """Vectorised ``classify_op`` over columns (one row per op metadata).

    Input columns: hlo_text, display_name, category, tf_op, shape_with_layout
    (missing columns read as ""). Returns numpy arrays bucket, collective,
    role, remat (bool), phase, kernel, precision, reason (object arrays with
    None where classify_op says None), equal to ``classify_op`` row by row.

    Cost grows with op *families*, not distinct ops. Unrolled layers and
    recompiled programs give thousands of ops that differ only in their
    instruction numbers (``fusion.12`` / ``fusion.1000012``), and layers
    unrolled with their own scopes give name stacks that differ only in a
    token no rule reads (``layers_3/mlp/dot_general``, ``layers_4/...``).
    Rows are grouped by their identity with every ``.<digits>`` written ``.0``
    (one C pass per text, or one regex pass over all the texts at once) and
    the name stack as the rules see it (`stack.rules_view`: the rules read it
    through that alone, `Op.tf`), and a family's first
    member is classified: when its reason quotes none of its numbered strings
    (`parse.Op.quote`), every member shares its verdict; when it quotes only
    the op's name, every member takes it with its own name quoted; otherwise
    (it quotes an operand or a ``calls=`` target, say) each member is
    classified on its own. Nothing but those quotes depends on the numbers
    (tests/test_classify_numbers.py checks it over every test corpus).

    ``memo``: the run's `Memo`, kept across calls (one per trace: the
    TensorCores of a host share their op metadata, so each op and each family
    is classified once per trace, not once per core); a new one when None.
    """
    codes, uniq = classify_codes(cols, n, memo)
    return columns_of(codes, uniq)


def columns_of(codes: np.ndarray, uniq: Sequence[OpClass]) -> dict[str, np.ndarray]:
    """The ``classify_columns`` arrays of rows classified as ``uniq[codes]``."""
    out: dict[str, np.ndarray] = {}
    for c in _OUT_COLUMNS:
        col = np.empty(len(uniq), dtype=object)
        col[:] = [getattr(r, c) for r in uniq]
        out[c] = col[codes]
    out["remat"] = out["remat"].astype(bool)
    return out


def classify_table(df):
    """``classify_columns`` over a pandas DataFrame, returning a DataFrame
    with the same index (for notebooks; the analysis uses classify_columns)."""
    import pandas as pd  # type: ignore[import-untyped]  # the notebook API's dependency (no stubs)

    out = classify_columns({c: df[c].tolist() for c in _IN_COLUMNS if c in df.columns}, n=len(df))
    return pd.DataFrame({c: pd.Series(v, dtype=bool if c == "remat" else object, index=df.index) for c, v in out.items()}, index=df.index)
