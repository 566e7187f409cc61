#!/usr/bin/env bash
# Performance gate with profanalyze, for any CI system (plain shell).
#
#   examples/ci_gate.sh [TRACE_OR_JSON] [BUDGET]
#
# Run from the repository root. TRACE_OR_JSON is the run to gate: a trace
# (.xplane.pb[.gz], run folder, log dir) or a `profanalyze analyze --json` file;
# by default the stored sample trace sample_traces/dense_short_fsdp.xplane.pb.gz.
# BUDGET defaults to examples/profanalyze.toml (its `baseline` is the known-good run).
#
# Environment:
#   PROFANALYZE      the command (default: profanalyze; e.g. .venv/bin/profanalyze)
#   BASELINE         override the budget's baseline (trace or analysis JSON)
#   PROFANALYZE_OUT  folder for the artifacts (default: profanalyze-gate)
#
# Exit status: that of `profanalyze check`: 0 every check passed, 1 a budget,
# regression or fail_on check failed, 2 bad input or budget file.
# Artifacts: junit.xml (one testcase per check), check.json, and when a
# baseline is known diff.html / diff.md / diff.json (what changed against it).
set -uo pipefail

TRACE="${1:-sample_traces/dense_short_fsdp.xplane.pb.gz}"
BUDGET="${2:-examples/profanalyze.toml}"
PROFANALYZE="${PROFANALYZE:-profanalyze}"
OUT="${PROFANALYZE_OUT:-profanalyze-gate}"
mkdir -p "$OUT"

baseline_args=()
if [[ -n "${BASELINE:-}" ]]; then
  baseline_args=(--baseline "$BASELINE")
fi

# 1. The gate: absolute budgets, regression against the baseline, fail_on findings.
"$PROFANALYZE" check "$TRACE" --budget "$BUDGET" "${baseline_args[@]}" \
  --junit "$OUT/junit.xml" --json "$OUT/check.json"
status=$?

# 2. For the humans reading a red build: what changed against the baseline.
#    (Never changes the job's status.)
if [[ $status -ne 2 ]]; then
  base="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("baseline") or "")' "$OUT/check.json" 2>/dev/null)"
  if [[ -n "$base" ]]; then
    "$PROFANALYZE" compare "$base" "$TRACE" -q -o "$OUT/diff.html" --markdown "$OUT/diff.md" --json "$OUT/diff.json" \
      || echo "ci_gate: compare failed (the gate result stands)" >&2
  fi
fi

exit $status
