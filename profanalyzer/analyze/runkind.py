"""Run kind: is the captured step a training step or a serving (inference)
step? An analysis fact, decided from the trace alone, with its reasons.

Evidence, each measured as TensorCore self time of the kept steps:
  * training: ops under a backward scope (``transpose(jvp(...))``), an
    optimizer scope, recomputed (remat) ops, and a program named like a
    training step (``train_step``, ``train``);
  * inference: ops or programs named for serving (decode, prefill, generate,
    sampling, logits, KV cache, paged / ragged-paged attention kernels, vLLM
    scopes), and a forward pass with JAX name stacks but no
    backward or optimizer scope at all.
Training evidence wins when it covers at least TRAINING_MIN_SHARE of the
step (a serving step has no backward pass); forward-only with name stacks is
inference; without name stacks the kind is ``unknown``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

RUN_KINDS = ("training", "inference", "unknown")

#: Share of the step that training-only scopes must cover to call it training.
TRAINING_MIN_SHARE = 0.01
#: Share of the compute time (matmul, attention, other compute) that ops with
#: a JAX name stack must cover before the absence of backward scopes means
#: anything (XLA-inserted copies and waits never carry one).
SCOPED_MIN_SHARE = 0.5

_INFERENCE = re.compile(
    r"(?<![a-z])(?:decode|decoding|prefill|generate|generation|sampl(?:e|er|ing)|compute_logits|logits"
    r"|kv_?cache|kv_?pages?|paged_attention|ragged_paged_attention|vllm|serving|speculative)(?![a-z])"
)
_TRAINING_PROGRAM = re.compile(r"(?<![a-z])(?:train_step|train|training|grad(?:ient)?s?_step)(?![a-z])")


def _normal(text: str) -> str:
    """What the markers are searched in: lower case, `-` read as `_`."""
    return text.lower().replace("-", "_")


def inference_marker(text: str) -> str | None:
    """The serving marker a tf_op / op name / program name carries, if any
    (callers search each distinct text once: `inference_markers`, opstats)."""
    m = _INFERENCE.search(_normal(text))
    return m.group(0) if m else None


#: Substrings one of which every serving marker contains (`_INFERENCE`'s
#: alternatives, normalised): texts without any cannot carry a marker.
_ANCHORS = ("decod", "prefill", "generat", "sampl", "logits", "kv", "paged_attention", "vllm", "serving", "speculative")


def inference_markers(texts: Sequence[str]) -> list[str | None]:
    """`inference_marker` of every text. The texts are joined and normalised
    once and searched for the anchors (plain substring searches); only the
    texts holding one are searched with the marker pattern."""
    out: list[str | None] = [None] * len(texts)
    if not texts:
        return out
    joined = "\n".join(texts)
    if not joined.isascii():  # lower() may change lengths: text by text
        return [inference_marker(t) for t in texts]
    low = _normal(joined)
    hits: list[int] = []
    for a in _ANCHORS:
        at = low.find(a)
        while at >= 0:
            hits.append(at)
            at = low.find(a, at + 1)
    if hits:
        ends = np.cumsum([len(t) + 1 for t in texts])  # each text, then its separator
        for i in sorted(set(np.searchsorted(ends, np.asarray(hits), side="right").tolist())):
            out[i] = inference_marker(texts[i])
    return out


def training_program(name: str) -> bool:
    return bool(_TRAINING_PROGRAM.search(name.lower()))


@dataclass(frozen=True)
class RunKindEvidence:
    """Per kept step and TensorCore (picoseconds), and the programs seen."""

    step_ps: float
    compute_ps: float  # matmul, attention and other compute (not waits, not collectives)
    scoped_ps: float  # compute ops with a JAX name stack (tf_op)
    forward_ps: float
    backward_ps: float
    optimizer_ps: float
    remat_ps: float
    inference_ps: float  # ops carrying a serving marker
    inference_markers: tuple[str, ...]  # the markers, most time first
    programs: tuple[str, ...]


def decide_run_kind(ev: RunKindEvidence) -> tuple[str, tuple[str, ...]]:
    """(run kind, reasons) from the evidence; see the module docstring."""
    step = ev.step_ps if ev.step_ps > 0 else 1.0
    reasons: list[str] = []
    train_ps = ev.backward_ps + ev.optimizer_ps + ev.remat_ps
    train_programs = [p for p in ev.programs if training_program(p)]
    serve_programs = [p for p in ev.programs if inference_marker(p)]
    if ev.backward_ps > 0:
        reasons.append(f"backward-pass scopes (transpose(jvp)) cover {ev.backward_ps / step:.1%} of the step")
    if ev.optimizer_ps > 0:
        reasons.append(f"optimizer scopes cover {ev.optimizer_ps / step:.1%} of the step")
    if ev.remat_ps > 0:
        reasons.append(f"recomputed (remat) ops cover {ev.remat_ps / step:.1%} of the step")
    if train_programs:
        reasons.append(f"program named like a training step: {train_programs[0]}")
    if train_ps / step >= TRAINING_MIN_SHARE or (train_programs and train_ps > 0):
        return "training", tuple(reasons)
    reasons = []
    if ev.inference_markers:
        reasons.append(f"serving markers in op scopes ({', '.join(ev.inference_markers[:4])}) cover "
                       f"{ev.inference_ps / step:.1%} of the step")
    if serve_programs:
        reasons.append(f"program named like a serving step: {serve_programs[0]}")
    scoped = ev.scoped_ps / ev.compute_ps if ev.compute_ps > 0 else 0.0
    if scoped >= SCOPED_MIN_SHARE:
        reasons.append(f"no backward, optimizer or remat scope although {scoped:.0%} of the compute carries JAX name "
                       "stacks: forward only")
        return "inference", tuple(reasons)
    if ev.inference_markers or serve_programs:
        return "inference", tuple(reasons)
    reasons.append(f"only {scoped:.0%} of the compute carries JAX name stacks, with no serving or training marker: "
                   "run kind not decidable")
    return "unknown", tuple(reasons)
