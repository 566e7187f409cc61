"""Shared fixtures: analyses of the bundled sample traces, computed once per session."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_traces"


#: A rule fixture `real-tpu/NAME` is the capture of sample_traces/real-tpu/NAME.tar.gz (a program that
#: ran on a TPU v5e), unpacked once per session.
REAL_TPU = "real-tpu/"


@functools.cache
def _real_tpu_logdir(name: str) -> Path:
    import tarfile
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="profanalyzer-real-tpu-"))
    with tarfile.open(SAMPLES / "real-tpu" / f"{name}.tar.gz") as tar:
        tar.extractall(base, filter="data")
    return base / name / "logdir"


def sample_path(name: str) -> Path:
    if name.startswith(REAL_TPU):
        return _real_tpu_logdir(name[len(REAL_TPU):])
    for suffix in (".xplane.pb.gz", ".xplane.pb"):
        p = SAMPLES / f"{name}{suffix}"
        if p.exists():
            return p
    raise FileNotFoundError(f"no sample trace {name!r} in {SAMPLES}")


def sample_names() -> list[str]:
    names = set()
    for p in SAMPLES.glob("*.xplane.pb*"):
        names.add(p.name.split(".xplane.pb")[0])
    return sorted(names)


def real_tpu_names() -> list[str]:
    """The rule fixtures the real-TPU corpus offers: `real-tpu/NAME`."""
    return sorted(REAL_TPU + p.name.removesuffix(".tar.gz") for p in (SAMPLES / "real-tpu").glob("*.tar.gz"))


def truth_of(name: str) -> dict:
    return json.loads((SAMPLES / f"{name}.truth.json").read_text())


@functools.cache
def run_of(name: str):
    """The run of a sample (`run`: read, analyse, rules, what a firing rule needs), kept without its
    attributed trace and input bytes; `NAME@CHIP` runs it as that chip (`--chip`): a rule whose lever
    exists on some chips only fires on the chip that has it (FP003: int8 on v6e, not on TPU7x)."""
    import dataclasses

    from profanalyzer.pipeline.run import RunOptions, run

    base, _, chip = name.partition("@")
    return dataclasses.replace(run(sample_path(base), RunOptions(chip=chip or None)), attributed=None, source=None)


def analysis_of(name: str):
    """The analysis of a sample's run (run_of), the one its findings were ranked over."""
    return run_of(name).analysis


def findings_of(name: str):
    return run_of(name).findings


@pytest.fixture(scope="session")
def analyses():
    return analysis_of


@functools.cache
def _sample_doc_text(name: str) -> str:
    from profanalyzer.model.documents import result_document

    return json.dumps(result_document(analysis_of(name), findings_of(name)))


def sample_doc(name: str) -> dict:
    """A fresh copy of a sample's JSON document (as `analyze --json` writes it)."""
    return json.loads(_sample_doc_text(name))


def run_cli(capsys, *args):
    """Run the CLI in-process: (exit code, stdout, stderr)."""
    from profanalyzer.cli import main

    rc = main([str(a) for a in args])
    out = capsys.readouterr()
    return rc, out.out, out.err
