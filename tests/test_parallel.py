"""Per-core work on threads (`profanalyzer.core.parallel`) gives the same
analysis as one thread, and errors come out in core order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from profanalyzer.core import parallel
from profanalyzer.pipeline.run import run_analysis

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


@pytest.mark.parametrize("name", ["dense_short_fsdp", "straggler_core", "moe_large_pp", "offload_on", "host_offload_train"])
def test_threads_equal_one_thread(name, monkeypatch):
    path = SAMPLES / f"{name}.xplane.pb.gz"
    many = json.dumps(run_analysis(path).to_dict(), sort_keys=True)
    monkeypatch.setattr(parallel, "MAX_THREADS", 1)
    one = json.dumps(run_analysis(path).to_dict(), sort_keys=True)
    assert many == one


def test_map_ordered_keeps_order_and_first_error():
    assert parallel.map_ordered(lambda x: x * x, range(20)) == [x * x for x in range(20)]

    def boom(x):
        if x in (3, 7):
            raise ValueError(f"bad {x}")
        return x

    with pytest.raises(ValueError, match="bad 3"):
        parallel.map_ordered(boom, range(10))
