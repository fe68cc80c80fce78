# pyiceberg-crypto: everything a fresh machine needs is installed by these targets.
#   make demo   set up, then run the end-to-end demo (encrypted Iceberg table, Python KMS)
#   make test   set up, then run the whole test-suite (real Spark, Iceberg, Hive metastore)
#   make bench  set up, then run the benchmarks and write bench/RESULTS.md (bench-quick: tiny sizes)
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
MVN ?= mvn
MVN_FLAGS ?= -B -q
JAR_DIR := pyiceberg_crypto/_jars
BRIDGE_JAR := $(JAR_DIR)/pyiceberg-crypto-bridge.jar
JAVA_SOURCES := $(shell find jars/src -name '*.java' 2>/dev/null) jars/pom.xml
PYTEST_ARGS ?=

.PHONY: setup venv jars demo test test-fast bench bench-quick clean

setup: venv jars

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

# The bridge jar, built by Maven; the pinned Iceberg runtime jar is fetched from Maven Central by
# the same pom (maven-dependency-plugin), so later builds run offline from ~/.m2.
jars: $(BRIDGE_JAR)

$(BRIDGE_JAR): $(JAVA_SOURCES)
	flock /tmp/pyiceberg-crypto-mvn.lock sh -c '$(MVN) $(MVN_FLAGS) -f jars/pom.xml package && \
	  mkdir -p $(JAR_DIR) && \
	  for jar in jars/target/pyiceberg-crypto-bridge.jar jars/target/lib/*.jar; do \
	    cp $$jar $(JAR_DIR)/.tmp.jar && mv -f $(JAR_DIR)/.tmp.jar $(JAR_DIR)/$$(basename $$jar); done'

demo: setup
	$(VENV)/bin/pyiceberg-crypto demo

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

test-fast: setup
	$(PY) -m pytest -m 'not slow' $(PYTEST_ARGS)

# Benchmarks (bench/README.md): full sizes write bench/RESULTS.md (~20 min on 2 cores); quick
# sizes print the same tables in < 3 minutes (data in the gitignored bench/.data/).
bench: setup
	$(PY) -m bench.run

bench-quick: setup
	$(PY) -m bench.run --quick

clean:
	rm -rf $(VENV) jars/target $(JAR_DIR)/*.jar .pytest_cache demo-warehouse
