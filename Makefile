# sluice — the usual targets.
#   make          build build/sluice, build/libsluice.so/.a, the Python extension
#   make demo     set up, build, make the demo dataset, run the main job on it
#   make test     set up, build, run every test (C, Python, sanitizers, fuzz corpora)
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
DEMO_DATA ?= $(BUILD)/demo-data
DEMO_FIELDS ?= $(BUILD)/demo-fields
DEMO_IMAGES ?= 2000
# PYTHON: the interpreter you choose (python3 by default). PY: the one every
# target runs: the project venv .venv/ when tools/setup.sh made one (PYTHON
# is externally managed, PEP 668), else PYTHON. Delete .venv/ to go back.
PYTHON ?= python3
PY = $(if $(wildcard .venv/bin/python),$(CURDIR)/.venv/bin/python,$(PYTHON))
export PYTHON

.PHONY: all setup setup-build setup-demo demo test test-c test-python test-asan test-tsan test-loaded test-setup fuzz clean

all: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DPython3_EXECUTABLE=$$(command -v $(PY)) $(CMAKE_FLAGS)

setup:
	@tools/setup.sh

setup-build:
	@tools/setup.sh --build

setup-demo:
	@tools/setup.sh --demo

$(DEMO_DATA)/.done: tools/make_demo_data.py
	$(PY) tools/make_demo_data.py $(DEMO_DATA) --images $(DEMO_IMAGES) --classes 10
	@touch $@

# Samples with fields: paired arrays (a crop group), LiDAR scans, and the
# demo images in WebDataset tar shards (tools/make_demo_fields.py)
$(DEMO_FIELDS)/.done: tools/make_demo_fields.py $(DEMO_DATA)/.done
	$(PY) tools/make_demo_fields.py $(DEMO_FIELDS) --images $(DEMO_DATA)
	@touch $@

demo: setup-demo
	$(MAKE) all
	$(MAKE) $(DEMO_DATA)/.done
	$(BUILD)/sluice bench $(DEMO_DATA) --preset train --batch 64 --budget 256M --epochs 2
	$(BUILD)/sluice bench $(DEMO_DATA) --preset val --batch 64 --budget 128M --epochs 1
	$(MAKE) $(DEMO_FIELDS)/.done
	$(BUILD)/sluice bench $(DEMO_FIELDS)/pairs.jsonl --fields $(DEMO_FIELDS)/pairs.fields.json --batch 4 --budget 64M --epochs 2
	$(BUILD)/sluice bench "$(DEMO_FIELDS)/$$(cat $(DEMO_FIELDS)/shards.txt)" --preset train --batch 64 --budget 256M --epochs 2

test: setup
	$(MAKE) all
	$(MAKE) test-c test-python test-asan test-tsan test-setup
	@echo "make test: all suites passed"

test-c: all
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-python: all
	PYTHONPATH=$(CURDIR)/python SLUICE_BUILD=$(CURDIR)/$(BUILD) $(PY) -m pytest -q tests/python

test-asan:
	cmake -S . -B $(BUILD)-asan -DCMAKE_BUILD_TYPE=Debug -DSL_SANITIZE=address,undefined -DSL_WITH_PYTHON=OFF $(CMAKE_FLAGS)
	cmake --build $(BUILD)-asan -j $(JOBS)
	cd $(BUILD)-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j $(JOBS)

# TSAN_TIMEOUT: seconds a case may run; TSAN_WRAP: a command ctest runs under.
TSAN_TIMEOUT ?= 300
TSAN_WRAP ?=
test-tsan:
	cmake -S . -B $(BUILD)-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSL_SANITIZE=thread -DSL_WITH_PYTHON=OFF -DSL_TEST_TIMEOUT=$(TSAN_TIMEOUT) $(CMAKE_FLAGS)
	cmake --build $(BUILD)-tsan -j $(JOBS)
	cd $(BUILD)-tsan && TSAN_OPTIONS=halt_on_error=1 $(TSAN_WRAP) ctest --output-on-failure -j $(JOBS) -L tsan -E fuzz_replay

# The TSan suite beside HOGS busy loops (tools/loaded.sh): a test whose
# premise leans on timing fails here before it fails in CI. A case may run
# 20 minutes here (slow is not hung); test-tsan sets 5 back.
HOGS ?= 2
test-loaded:
	$(MAKE) test-tsan TSAN_TIMEOUT=1200 TSAN_WRAP="$(CURDIR)/tools/loaded.sh $(HOGS)"

# The set-up and the package from a clean copy of HEAD (git archive): with
# the stock system Python (/usr/bin/python3: venv, build, demo) and with
# `pip install .` into a fresh venv (import sluice, the sluice command).
test-setup:
	tests/setup/test_system_python.sh
	PY=$(PY) tests/setup/test_pip_install.sh

# libFuzzer harnesses (clang): make fuzz FUZZ_SECONDS=60
FUZZ_SECONDS ?= 30
fuzz:
	@tools/setup.sh --fuzz
	CC=clang cmake -S . -B $(BUILD)-fuzz -DSL_WITH_FUZZ=ON -DSL_WITH_PYTHON=OFF $(CMAKE_FLAGS)
	cmake --build $(BUILD)-fuzz -j $(JOBS)
	for f in $(BUILD)-fuzz/fuzz_*; do case $$f in *_replay) continue;; esac; \
	  c=tests/fuzz/corpus/$$(basename $$f | sed 's/^fuzz_//'); mkdir -p $$c tests/fuzz/artifacts; \
	  $$f -max_total_time=$(FUZZ_SECONDS) -artifact_prefix=tests/fuzz/artifacts/ $$c || exit 1; done

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-tsan $(BUILD)-fuzz python/sluice/*.so
