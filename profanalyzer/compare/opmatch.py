"""Ops matched across two analyses (compare's op tables).

Instruction numbers change between compiles (`fusion.198` in one build is
`fusion.311` in the next), so an op is matched by OP_KEY: its tf_op, its name
with the `.N` numbers removed (the `deduplicated_name` when XProf gives one)
and its bucket. All ops of a side sharing a key are summed; the ops come
from the analyses' top / remat / kernel op lists, so an op listed on one side
only `entered` or `left` them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from profanalyzer.model.analysis import Analysis, TopOp
from profanalyzer.model.documents import is_finite_number

#: Ops whose time changed by less than this fraction of the base step are not listed.
OP_MIN_DELTA = 0.001
#: Ops listed per direction.
OPS_SHOWN = 15

OP_KEY = "(tf_op, instruction name without its .N numbers (deduplicated_name when present), bucket)"


_INSTR_NUM = re.compile(r"\.\d+(?=\.|$)")


@dataclass(frozen=True)
class OpChange:
    match_name: str  # instruction name without numbers (or deduplicated name)
    tf_op: str
    bucket: str
    status: str  # slower | faster | entered | left
    base_names: tuple[str, ...]
    new_names: tuple[str, ...]
    base_ps: float | None  # None: not in that side's op lists
    new_ps: float | None
    delta_ps: float | None
    delta_fraction: float | None  # of the base step time


@dataclass(frozen=True)
class OpsChange:
    key: str
    min_delta_fraction: float
    slower: tuple[OpChange, ...]
    faster: tuple[OpChange, ...]
    entered: tuple[OpChange, ...]  # listed on NEW only
    left: tuple[OpChange, ...]  # listed on BASE only
    matched: int


def _seconds(x: object) -> float:
    """A finite number of the JSON form, else 0."""
    return float(x) if is_finite_number(x) else 0.0


def match_name(op: TopOp | Mapping) -> str:
    """The op's name for matching across compiles (see OP_KEY); `op` is a
    TopOp or its JSON form."""
    if isinstance(op, TopOp):
        name = op.deduplicated_name or op.name
    else:
        name = str(op.get("deduplicated_name") or "") or str(op.get("name") or "")
    return _INSTR_NUM.sub("", name)


def op_groups(a: Analysis) -> dict[tuple[str, str, str], dict]:
    seen: set[tuple[str, str, str]] = set()
    groups: dict[tuple[str, str, str], dict] = {}
    for lst in (a.top_ops, a.remat_ops, a.kernel_ops):
        for op in lst:
            ident = (op.name, op.hlo_category, op.bucket)
            if ident in seen:
                continue
            seen.add(ident)
            key = (op.tf_op or "", match_name(op), ident[2])
            g = groups.setdefault(key, {"ps": 0.0, "names": []})
            g["ps"] += _seconds(op.self_ps)
            g["names"].append(ident[0])
    return groups


def _op_change(key: tuple[str, str, str], b: dict | None, n: dict | None, status: str,
               bp: float | None, np_: float | None, b_step: float) -> OpChange:
    """One op group's change: `b`/`n` its base/new group (None where absent), `bp`/`np_` their times."""
    tf_op, name, bucket = key
    return OpChange(
        match_name=name,
        tf_op=tf_op,
        bucket=bucket,
        status=status,
        base_names=tuple(sorted(b["names"])) if b else (),
        new_names=tuple(sorted(n["names"])) if n else (),
        base_ps=bp,
        new_ps=np_,
        delta_ps=(np_ - bp) if bp is not None and np_ is not None else None,
        delta_fraction=((np_ - bp) / b_step) if bp is not None and np_ is not None and b_step else None,
    )


def _known(ps: float | None) -> float:
    """A time the list being sorted has on every change (slower/faster: both
    sides and the delta; entered: the new side; left: the base side)."""
    if ps is None:
        raise ValueError("an op change without the time its list is sorted by")
    return ps


def ops_change(base: Analysis, new: Analysis, b_step: float) -> OpsChange:
    """The ops that got slower / faster, entered or left the op lists, matched by OP_KEY."""
    bg, ng = op_groups(base), op_groups(new)
    floor = OP_MIN_DELTA * abs(b_step)
    slower: list[OpChange] = []
    faster: list[OpChange] = []
    entered: list[OpChange] = []
    left: list[OpChange] = []
    matched = 0
    for key in sorted(set(bg) | set(ng)):
        b, n = bg.get(key), ng.get(key)
        if b and n:
            matched += 1
            d = n["ps"] - b["ps"]
            if d == 0 or abs(d) < floor:
                continue
            (slower if d > 0 else faster).append(_op_change(key, b, n, "slower" if d > 0 else "faster", b["ps"], n["ps"], b_step))
        elif n:
            if n["ps"] >= floor:
                entered.append(_op_change(key, b, n, "entered", None, n["ps"], b_step))
        elif b and b["ps"] >= floor:
            left.append(_op_change(key, b, n, "left", b["ps"], None, b_step))
    slower.sort(key=lambda o: (-_known(o.delta_ps), o.tf_op, o.match_name))
    faster.sort(key=lambda o: (_known(o.delta_ps), o.tf_op, o.match_name))
    entered.sort(key=lambda o: (-_known(o.new_ps), o.tf_op, o.match_name))
    left.sort(key=lambda o: (-_known(o.base_ps), o.tf_op, o.match_name))
    return OpsChange(
        key=OP_KEY,
        min_delta_fraction=OP_MIN_DELTA,
        slower=tuple(slower[:OPS_SHOWN]),
        faster=tuple(faster[:OPS_SHOWN]),
        entered=tuple(entered[:OPS_SHOWN]),
        left=tuple(left[:OPS_SHOWN]),
        matched=matched,
    )
