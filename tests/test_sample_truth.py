"""#32 item 10: the shipped samples' truth agrees with itself and with the tool. Every sample's truth.json
names no lever both to fire and to stay quiet; the levers it expects to fire get recommendations worth at
least 3% of the step together, and those it expects quiet stay under 3% (the truth files' own definition)."""

from __future__ import annotations

import json

import pytest
from conftest import SAMPLES, findings_of, sample_names

#: The truth files' threshold: `quiet` levers must stay under this share of the step (samples.py).
QUIET_UNDER = 0.03


def _truth(name: str) -> dict | None:
    p = SAMPLES / f"{name}.truth.json"
    return json.loads(p.read_text()) if p.exists() else None


@pytest.mark.parametrize("name", [n for n in sample_names() if _truth(n) is not None])
def test_sample_expectations_hold(name):
    expect = _truth(name)["expect"]
    assert not set(expect["fire"]) & set(expect["quiet"]), expect
    by: dict[str, float] = {}
    for r in findings_of(name).recommendations:
        by[r.lever] = by.get(r.lever, 0.0) + r.estimated_saving_fraction
    for lever in expect["fire"]:
        assert by.get(lever, 0.0) >= QUIET_UNDER, (lever, by)
    for lever in expect["quiet"]:
        assert by.get(lever, 0.0) < QUIET_UNDER, (lever, by)
