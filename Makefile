# profanalyzer developer entry points. Everything runs inside .venv, created on demand.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
SAMPLE ?= sample_traces/dense_short_fsdp.xplane.pb.gz
#: The modules mypy checks (`make lint`): every module of profanalyzer/ but synth/ (the test-data
#: generator) and the generated *_pb2.py, and every rule of heuristics/ -- found, so a new one is in.
TYPED  ?= $(sort $(shell find profanalyzer heuristics -name '*.py' -not -path 'profanalyzer/synth/*' -not -name '*_pb2.py'))
#: What ruff checks (`make lint`; rules in pyproject.toml).
LINTED ?= profanalyzer heuristics tests tools benchmarks setup.py

.PHONY: test lint report reports docs venv proto samples bench fuzz clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,xprof,fleet,gcs,mcp,lint]'
	touch $@

venv: $(VENV)/.installed

## make test: create the venv, install with test extras, run the whole suite.
test: venv
	$(PY) -m pytest

## make lint: ruff over the code (pyflakes + pycodestyle errors/warnings, see
## pyproject.toml) and mypy over the core modules in TYPED; pinned versions.
lint: venv
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/mypy $(TYPED)

## make report: set up and run the main job on the default bundled sample trace
## (terminal summary + ./dense_short_fsdp.report.html).
report: venv
	$(VENV)/bin/profanalyze $(SAMPLE)

## make docs: regenerate the generated pages of docs/ (CLI reference, rules) and build the site strictly.
docs: venv
	$(PY) tools/make_docs.py
	$(VENV)/bin/mkdocs build --strict -q -d build/site

## make reports: regenerate reports/ (the example report of every sample trace).
reports: venv
	$(PY) tools/make_reports.py

## make samples: regenerate sample_traces/ (deterministic: fixed seeds).
samples: venv
	$(PY) -m profanalyzer.synth.samples sample_traces

## make proto: regenerate profanalyzer/read/xspace/xplane_pb2.py and profanalyzer/read/hlo/hlo_min_pb2.py from their .proto files.
proto:
	$(PYTHON) -m venv .venv-proto
	.venv-proto/bin/pip install -q grpcio-tools==1.71.0
	.venv-proto/bin/python -m grpc_tools.protoc -I. --python_out=. profanalyzer/read/xspace/xplane.proto profanalyzer/read/hlo/hlo_min.proto

FUZZ_EXAMPLES ?= 10000

## make fuzz: long fuzz campaign: FUZZ_EXAMPLES mutated XSpace inputs through
## read -> analyze -> rules -> JSON/terminal/Markdown/HTML (~17 min for 10,000).
fuzz: venv
	PROFANALYZE_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest tests/test_fuzz.py -q -p no:cacheprovider --hypothesis-show-statistics

bench: venv
	$(PY) benchmarks/read_bench.py

clean:
	rm -rf $(VENV) .venv-proto .pytest_cache .mypy_cache .ruff_cache build *.egg-info
