# %% [markdown]
# # profanalyzer in a notebook
#
# Cells of a notebook as a script (`# %%` cells: VS Code, Jupytext, or plain
# `python examples/notebook.py [TRACE]`). `tests/test_notebook.py` runs it.
# `profanalyzer.load` takes a path, a URL (`gs://...`), bytes, a run folder,
# a log dir or a saved `--json` document.

# %%
import sys
from pathlib import Path

import profanalyzer

source = sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).resolve().parent.parent / "sample_traces" / "offload_off.xplane.pb.gz")
a = profanalyzer.load(source)
a  # in Jupyter: the summary card (report/registry.py's NOTEBOOK_RENDERERS)

# %% Where did the step go? The run's breakdown, largest first.
f = a.frames()
buckets = f["buckets"]
run = buckets[buckets.scope == "run"].sort_values("fraction", ascending=False)
print(run[["bucket", "ps", "fraction"]].head(6).to_string(index=False))

# %% Which TensorCore spends the most time idle?
cores = buckets[buckets.scope == "core"].pivot(index="core", columns="bucket", values="fraction")
print(cores["idle"].sort_values(ascending=False).head(3).to_string())

# %% The ops table, summed per bucket (self time per kept step per TensorCore).
ops = f["ops"]
top = ops[ops.table == "top_ops"]
print(top.groupby("bucket")["self_ps"].sum().sort_values(ascending=False).to_string())

# %% The most exposed collective windows, and how much of each the compute hid.
w = f["windows"]
print(w[w.source == "top_exposed"][["core", "step", "type", "window_ps", "exposed_ps", "hidden_fraction"]].head(5).to_string(index=False))

# %% What to change first: the findings, ranked by saving.
print(f["findings"][["rank", "code", "saving_fraction", "guide_section"]].to_string(index=False))
if a.findings.recommendations:
    a.findings.recommendations[0]  # in Jupyter: the recommendation's card
