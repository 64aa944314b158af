# Hookscope entry points. Every target sets up what it needs itself (idempotent).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
NPM    ?= npm

.PHONY: setup setup-python setup-node build wheel bundle package demo studio test lint test-python test-ts test-e2e screenshots bench bench-editor bench-py312 protocol clean

setup: setup-python setup-node

# Python: a virtual environment with torch pinned to the CPU wheel on local disk.
setup-python: $(VENV)/.stamp
$(VENV)/.stamp: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

# Node: the extension's build and test tools, and ESLint in its own folder (extension/eslint:
# typescript-eslint reads the code with TypeScript 5.9; the extension builds with TypeScript 7).
setup-node: node_modules/.stamp extension/eslint/node_modules/.stamp
node_modules/.stamp: package.json package-lock.json
	$(NPM) ci --no-audit --no-fund
	touch $@
extension/eslint/node_modules/.stamp: extension/eslint/package.json extension/eslint/package-lock.json
	$(NPM) ci --prefix extension/eslint --no-audit --no-fund
	touch $@

build: setup
	$(NPM) run build

# The Python package for the terminal and the API (`hookscope run`, `import hookscope`):
# dist/hookscope-<version>-py3-none-any.whl. Rebuilt when a backend file changes; build/ is
# cleared first so a deleted module never lingers in the wheel.
VERSION        := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
WHEEL          := dist/hookscope-$(VERSION)-py3-none-any.whl
BACKEND_FILES  := $(shell find backend -type f -not -path '*/__pycache__/*' -not -path '*.egg-info/*')
wheel: $(WHEEL)
$(WHEEL): pyproject.toml README.md $(BACKEND_FILES) | $(VENV)/.stamp
	rm -rf build dist/hookscope-*.whl
	$(PY) -m pip wheel -q --no-deps -w dist .
	rm -rf build

# The Python side the .vsix carries (see bundled/requirements.txt): bundled/tool holds the
# hookscope package from the wheel (its install record dropped), bundled/libs the pinned
# pure-Python libraries, fetched from the package index once per change of the requirements
# file (console scripts, the C/Cython sources of debugpy's optional speedups and its vendored test
# suites are dropped: never run). Nothing under bundled/ but the requirements file is committed.
bundle: bundled/.tool.stamp bundled/.libs.stamp
bundled/.libs.stamp: bundled/requirements.txt Makefile | $(VENV)/.stamp
	rm -rf bundled/libs
	MSGPACK_PUREPYTHON=1 $(PY) -m pip install -q -t bundled/libs --no-deps --implementation py \
	  --no-compile --require-hashes -r bundled/requirements.txt
	rm -rf bundled/libs/bin
	find bundled/libs \( -name '*.c' -o -name '*.pyx' -o -name '_test_*.py' \) -delete
	find bundled/libs -type d -name tests -prune -exec rm -rf {} +
	touch $@
bundled/.tool.stamp: $(WHEEL)
	rm -rf bundled/tool
	$(PY) -m pip install -q -t bundled/tool --no-deps --no-compile $(WHEEL)
	rm -rf bundled/tool/bin bundled/tool/*.dist-info
	touch $@

# hookscope.vsix: the extension, the hookscope package and its pure-Python libraries.
package: build
	$(NPM) run package

protocol: setup-python
	$(PY) -m hookscope.link.protocol_gen extension/src/protocol/messages.gen.ts

demo: setup
	$(PY) examples/demo.py

studio: package
	bash tests/e2e/studio.sh

test: setup build lint test-python test-ts test-e2e

# ruff (lint + format), mypy over the whole package (strict on what runs in the user's process: hooks, engine, link), ESLint
# with type-aware rules (the extension host, the webview and the unit tests, each with its own
# tsconfig), and the TypeScript typecheck of the host and the webview each on its own (test-ts runs it).
lint: setup
	$(PY) -m ruff check backend tests bench examples
	$(PY) -m ruff format --check backend tests bench examples
	$(PY) -m mypy
	extension/eslint/node_modules/.bin/eslint -c extension/eslint/eslint.config.mjs extension/src extension/webview tests/extension

test-python: setup-python
	$(PY) -m pytest -q

test-ts: setup-node build
	$(NPM) run test:unit

test-e2e: package
	bash tests/e2e/run.sh

# Refresh the README's screenshot (docs/screenshot.png) from the debugging spec's paused moment.
screenshots: package
	HOOKSCOPE_UPDATE_SCREENSHOTS=1 bash tests/e2e/run.sh tests/e2e/specs/10-debugging.e2e.ts

# The benchmark's own environment: the peers (transformers, TorchLens) never enter the test venv.
BENCH_VENV := .venv-bench
$(BENCH_VENV)/.stamp: pyproject.toml
	test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install -q --upgrade pip
	$(BENCH_VENV)/bin/python -m pip install -q torch==2.13.0
	$(BENCH_VENV)/bin/python -m pip install -q -e '.[dev]' transformers torchlens
	touch $@

bench: $(BENCH_VENV)/.stamp package
	$(BENCH_VENV)/bin/python bench/run.py --python $(BENCH_VENV)/bin/python \
		$(if $(wildcard $(BENCH_VENV_312)/bin/python),--also-python $(BENCH_VENV_312)/bin/python)

# Optional: the side-by-side row again under Python 3.12 (debugpy's sys.monitoring), added to make bench
# when this venv exists. PyPI has only CUDA builds of torch for 3.12: about 5.5 GB, run on the CPU.
# PYTHON312 names the interpreter where python3.12 is not on PATH (pyenv: PYTHON312=$(pyenv root)/versions/3.12.1/bin/python).
BENCH_VENV_312 := .venv-bench312
PYTHON312      ?= python3.12
bench-py312:
	test -x $(BENCH_VENV_312)/bin/python || $(PYTHON312) -m venv $(BENCH_VENV_312)
	$(BENCH_VENV_312)/bin/python -m pip install -q torch==2.13.0
	$(BENCH_VENV_312)/bin/python -m pip install -q -e .

# The editor-latency rows alone (hook -> Tensors panel, stop -> Variables), in code-server.
bench-editor: package
	bash tests/e2e/run.sh bench/editor/latency.bench.ts

clean:
	rm -rf $(VENV) $(BENCH_VENV) $(BENCH_VENV_312) node_modules dist out *.vsix .e2e build bundled/libs bundled/tool bundled/.*.stamp
