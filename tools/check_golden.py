#!/usr/bin/env python3
"""Check profanalyzer's op classifier against XProf's own per-op table.

Reads XProf's ``hlo_stats`` table of a real v5p MaxText training run
(``../shared/reference/xprof-golden-v5p-hlo_stats.json.gz`` beside the repo by
default; the file is reference data and is not copied into the project),
classifies every op with :func:`profanalyzer.classify.classify_op`, and prints:

* bucket agreement with what XProf's ``category`` implies (``EXPECTED`` below),
  per category, count- and self-time-weighted;
* remat agreement with XProf's ``hlo_rematerialization`` column;
* our bucket totals; the disagreements.

"Refinements" are ops whose XProf category says plain compute (loop fusion,
data formatting, broadcast, iota, ...) or matmul but that the classifier puts
in ``attention`` because their ``tf_op`` sits inside an attention-core scope
(splash-kernel layout copies, mask iotas). XProf's category cannot say
"attention", so these are reported apart from true disagreements.

Usage: ``python tools/check_golden.py [PATH] [--all]`` (``--all`` lists every op).
Exit status 0, or 2 when the file is missing/unreadable.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from profanalyzer.classify import COLLECTIVE_BUCKETS, MATMUL_BUCKETS, classify_op  # noqa: E402

DEFAULT_PATH = REPO.parent / "shared" / "reference" / "xprof-golden-v5p-hlo_stats.json.gz"

_ANY_COLLECTIVE = frozenset(COLLECTIVE_BUCKETS)
_OTHER = frozenset({"other_compute"})
_ATTN_KERNEL_NAME = re.compile(r"splash_m[hgq]a|flash_attention|paged_attention", re.I)
_GMM_NAME = re.compile(r"(?<![a-z0-9])t?gmm(?![a-z0-9])", re.I)

# What XProf's category implies, in order: (category regex, op-name regex or
# None, allowed buckets, label). Categories that do not pin a bucket by
# themselves (custom fusion, custom-call) are split by the op-name conventions
# of the facts file (async-collective-*, splash_*/flash_* kernels, gmm).
EXPECTED: tuple[tuple[re.Pattern[str], re.Pattern[str] | None, frozenset[str], str], ...] = (
    (re.compile(r"^(convolution fusion|convolution|output fusion)$"), None, frozenset(MATMUL_BUCKETS), "matmul"),
    (re.compile(r"^(all-reduce-scatter fusion|reduce-scatter(-start|-done)?)$"), None,
     frozenset({"reduce_scatter"}), "reduce_scatter"),
    (re.compile(r"^all-gather( fusion|-start|-done)?$"), None, frozenset({"all_gather"}), "all_gather"),
    (re.compile(r"^all-reduce( fusion|-start|-done)?$"), None, frozenset({"all_reduce"}), "all_reduce"),
    (re.compile(r"^all-to-all$"), None, frozenset({"all_to_all"}), "all_to_all"),
    (re.compile(r"^(collective-permute(-start|-done)?|send(-done)?|recv(-done)?|infeed|outfeed)$"), None,
     frozenset({"other_collective"}), "other_collective"),
    (re.compile(r"^(custom fusion|async-start|async-done)$"), re.compile(r"^async-collective-(start|done)"),
     _ANY_COLLECTIVE, "collective"),
    (re.compile(r"^(custom fusion|custom-call)$"), _GMM_NAME, frozenset(MATMUL_BUCKETS), "matmul"),
    (re.compile(r"^custom-call$"), _ATTN_KERNEL_NAME, frozenset({"attention"}), "attention"),
    (re.compile(r".*"), None, _OTHER, "other_compute"),
)


def expected_for(category: str, op_name: str) -> tuple[frozenset[str], str]:
    cat = " ".join((category or "").lower().split())
    for cat_rx, name_rx, allowed, label in EXPECTED:
        if cat_rx.match(cat) and (name_rx is None or name_rx.search(op_name or "")):
            return allowed, label
    raise AssertionError("EXPECTED ends with a catch-all")  # pragma: no cover


@dataclass
class Row:
    category: str
    name: str
    tf_op: str
    text: str
    self_time: float
    xprof_remat: bool
    bucket: str = ""
    reason: str = ""
    remat: bool = False
    expected: frozenset[str] = frozenset()
    expected_label: str = ""

    @property
    def agrees(self) -> bool:
        return self.bucket in self.expected

    @property
    def refinement(self) -> bool:
        return (not self.agrees and self.bucket == "attention" and "[attention.scope]" in self.reason
                and self.expected_label in ("other_compute", "matmul"))


@dataclass
class Summary:
    rows: list[Row]
    total_time: float
    n: int = 0
    agree_n: int = 0
    agree_t: float = 0.0
    refine_n: int = 0
    refine_t: float = 0.0
    remat_agree_n: int = 0
    remat_agree_t: float = 0.0
    per_category: dict[str, dict] = field(default_factory=dict)

    def pct_t(self, t: float) -> float:
        return 100.0 * t / self.total_time if self.total_time else 0.0

    @property
    def bucket_agreement_count(self) -> float:
        return 100.0 * self.agree_n / self.n if self.n else 0.0

    @property
    def bucket_agreement_time(self) -> float:
        return self.pct_t(self.agree_t)

    @property
    def refined_agreement_count(self) -> float:
        return 100.0 * (self.agree_n + self.refine_n) / self.n if self.n else 0.0

    @property
    def refined_agreement_time(self) -> float:
        return self.pct_t(self.agree_t + self.refine_t)

    @property
    def remat_agreement_count(self) -> float:
        return 100.0 * self.remat_agree_n / self.n if self.n else 0.0

    @property
    def remat_agreement_time(self) -> float:
        return self.pct_t(self.remat_agree_t)


def load_golden(path: Path) -> list[Row]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        data = json.load(fh)
    ids = [c["id"] for c in data["cols"]]
    rows: list[Row] = []
    for r in data["rows"]:
        d = {k: (c or {}).get("v") for k, c in zip(ids, r["c"], strict=True)}
        rows.append(Row(
            category=d.get("category") or "",
            name=d.get("hlo_op_name") or "",
            tf_op=d.get("tf_op_name") or "",
            text=d.get("hlo_op_expression") or "",
            self_time=float(d.get("total_self_time") or 0.0),
            xprof_remat=(d.get("hlo_rematerialization") == "Yes"),
        ))
    return rows


def check(path: Path = DEFAULT_PATH) -> Summary:
    rows = load_golden(path)
    total = sum(r.self_time for r in rows)
    s = Summary(rows=rows, total_time=total, n=len(rows))
    for r in rows:
        c = classify_op(r.text, r.name, r.category, r.tf_op)
        r.bucket, r.reason, r.remat = c.bucket, c.reason, c.remat
        r.expected, r.expected_label = expected_for(r.category, r.name)
        pc = s.per_category.setdefault(r.category, {
            "n": 0, "t": 0.0, "agree_n": 0, "agree_t": 0.0, "refine_n": 0, "refine_t": 0.0,
            "remat_n": 0, "remat_agree_n": 0, "buckets": defaultdict(float), "expected": set()})
        pc["expected"].add(r.expected_label)
        pc["n"] += 1
        pc["t"] += r.self_time
        pc["buckets"][r.bucket] += r.self_time
        if r.agrees:
            s.agree_n += 1
            s.agree_t += r.self_time
            pc["agree_n"] += 1
            pc["agree_t"] += r.self_time
        elif r.refinement:
            s.refine_n += 1
            s.refine_t += r.self_time
            pc["refine_n"] += 1
            pc["refine_t"] += r.self_time
        if r.remat == r.xprof_remat:
            s.remat_agree_n += 1
            s.remat_agree_t += r.self_time
            pc["remat_agree_n"] += 1
        pc["remat_n"] += r.xprof_remat
    return s


def _table(headers: list[str], body: list[list[str]]) -> str:
    widths = [max(len(h), *(len(row[i]) for row in body)) if body else len(h) for i, h in enumerate(headers)]
    fmt = "  ".join(f"{{:{'<' if i == 0 else '>'}{w}}}" for i, w in enumerate(widths))
    lines = [fmt.format(*headers), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*row) for row in body]
    return "\n".join(lines)


def report(s: Summary, list_all: bool = False) -> str:
    out: list[str] = []
    out.append(f"{s.n} ops, total self time {s.total_time:,.0f} us\n")
    out.append("Bucket vs XProf category (agree = bucket allowed by the category; "
               "refined = attention-scope refinement):")
    body = []
    for cat, pc in sorted(s.per_category.items(), key=lambda kv: -kv[1]["t"]):
        ours = ", ".join(f"{b} {s.pct_t(t):.2f}%" for b, t in sorted(pc["buckets"].items(), key=lambda kv: -kv[1]))
        body.append([cat, "|".join(sorted(pc["expected"])), str(pc["n"]), f"{s.pct_t(pc['t']):.2f}%",
                     f"{pc['agree_n']}/{pc['n']}", f"{100 * pc['agree_t'] / pc['t'] if pc['t'] else 100:.1f}%",
                     str(pc["refine_n"]), f"{pc['remat_agree_n']}/{pc['n']}", ours])
    out.append(_table(["category", "expected", "ops", "time", "agree#", "agree_t", "refined#", "remat#",
                       "our buckets (time share of step)"], body))
    out.append("")
    out.append(f"Bucket agreement (strict):   {s.agree_n}/{s.n} ops = {s.bucket_agreement_count:.2f}%   "
               f"time-weighted {s.bucket_agreement_time:.2f}%")
    out.append(f"  + attention refinements:   {s.agree_n + s.refine_n}/{s.n} ops = "
               f"{s.refined_agreement_count:.2f}%   time-weighted {s.refined_agreement_time:.2f}%")
    out.append(f"Remat agreement:             {s.remat_agree_n}/{s.n} ops = {s.remat_agreement_count:.2f}%   "
               f"time-weighted {s.remat_agreement_time:.2f}%")
    ours_remat = sum(r.self_time for r in s.rows if r.remat)
    theirs_remat = sum(r.self_time for r in s.rows if r.xprof_remat)
    out.append(f"Remat share of op self time: ours {s.pct_t(ours_remat):.2f}%, XProf {s.pct_t(theirs_remat):.2f}%")
    out.append("")
    totals: dict[str, float] = defaultdict(float)
    for r in s.rows:
        totals[r.bucket] += r.self_time
    out.append("Our buckets (share of op self time): " + ", ".join(
        f"{b} {s.pct_t(t):.2f}%" for b, t in sorted(totals.items(), key=lambda kv: -kv[1])))
    out.append("")
    dis = [r for r in s.rows if not r.agrees and not r.refinement]
    ref = [r for r in s.rows if r.refinement]
    rem = [r for r in s.rows if r.remat != r.xprof_remat]
    for title, items in (("Disagreements", dis), ("Attention refinements", ref), ("Remat disagreements", rem)):
        out.append(f"{title}: {len(items)}")
        for r in sorted(items, key=lambda r: -r.self_time):
            out.append(f"  {r.name[:60]:60s} [{r.category}] {s.pct_t(r.self_time):.3f}%  "
                       f"expected {r.expected_label} got {r.bucket}  {r.reason[:110]}")
    if list_all:
        out.append("\nAll ops:")
        for r in sorted(s.rows, key=lambda r: -r.self_time):
            out.append(f"  {r.name[:60]:60s} [{r.category}] {s.pct_t(r.self_time):.3f}% -> {r.bucket}"
                       f"{' remat' if r.remat else ''}  {r.reason[:120]}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path", nargs="?", default=str(DEFAULT_PATH), help="XProf hlo_stats JSON(.gz)")
    ap.add_argument("--all", action="store_true", help="list every op with its bucket and reason")
    args = ap.parse_args(argv)
    path = Path(args.path)
    try:
        s = check(path)
    except (OSError, ValueError, KeyError) as exc:
        print(f"check_golden: cannot read {path}: {exc}", file=sys.stderr)
        return 2
    print(report(s, list_all=args.all))
    return 0


if __name__ == "__main__":
    sys.exit(main())
