# pyiceberg-crypto: everything a fresh machine needs is installed by these targets.
#   make demo   set up, then run the end-to-end demo (encrypted Iceberg table, Python KMS)
#   make test   set up, then run the whole test-suite on Spark 4.1 and the spine on Spark 3.5
#   make test-fast  the unit lane: every test that needs no JVM and no system package, with no java on PATH (< 3 min)
#   make bench  set up, then run the benchmarks and write bench/RESULTS.md (bench-quick: tiny sizes)
#   make dist   build the sdist and the wheel in build's isolated environment (only `build` installed,
#               in .cache/build-venv; the wheel carries the Maven-built bridge jar), and beside them
#               the test kit's wheel, pyiceberg-crypto-testing (testkit/)
#   make docs   build the documentation site into site/ (mkdocs build --strict), open site/index.html
# Users do not need any of this: `pip install pyiceberg-crypto` (README, "Install").
SHELL := /bin/bash
PYTHON ?= python3
# Primary line (Spark 4.1): the whole suite. Second line (Spark 3.5): the spine (-m spine).
VENV := .venv
PY := $(VENV)/bin/python
VENV35 := .venv-spark3.5
PY35 := $(VENV35)/bin/python
# Tested versions, pinned for the project's own environments only (pyproject.toml declares ranges).
CONSTRAINTS := constraints/spark-4.1.txt
CONSTRAINTS35 := constraints/spark-3.5.txt
BRIDGE_JAR := pyiceberg_crypto/_jars/pyiceberg-crypto-bridge.jar
TESTKIT_JAR := jars/target/pyiceberg-crypto-bridge-tests.jar
TESTING_JAR := pyiceberg_crypto/testing/_jars/pyiceberg-crypto-testing.jar
JAVA_SOURCES := $(shell find jars/src -name '*.java' 2>/dev/null) jars/pom.xml jars/build_bridge.py
# The pinned Iceberg runtimes (both lines), AWS bundle, Kafka connector and Kafka broker, downloaded once and checked against
# their pinned SHA-256 by the package's own `pyiceberg-crypto jars download`: the project's
# sessions use local jars (the offline path); the newcomer test covers spark.jars.packages.
RUNTIME_JARS := .cache/jars
export PYICEBERG_CRYPTO_JARS := $(CURDIR)/$(RUNTIME_JARS)
PYTEST_ARGS ?=

.PHONY: setup setup-spark3.5 venv venv-spark3.5 jars runtime-jars trino-jars yarn-jars system-packages demo test test-fast \
	test-spark3.5 bench bench-quick dist clean fuzz docs jvm-archive

setup: venv jars runtime-jars

setup-spark3.5: venv-spark3.5 jars runtime-jars

venv: $(VENV)/.installed

venv-spark3.5: $(VENV35)/.installed

# Editable installs; the Makefile builds the jars itself (with the test kit), so the package's
# build hook is told to skip Maven here. --no-compile: pip would byte-compile all ~12,000 modules
# of the environment (~20 s of one core, before any lane starts); Python compiles the ones a
# program imports on their first import and keeps them.
$(VENV)/.installed: pyproject.toml setup.py $(CONSTRAINTS)
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	PYICEBERG_CRYPTO_SKIP_JAR_BUILD=1 $(PY) -m pip install -q --no-compile -c $(CONSTRAINTS) -e '.[test]'
	touch $@

$(VENV35)/.installed: pyproject.toml setup.py $(CONSTRAINTS35)
	test -d $(VENV35) || $(PYTHON) -m venv $(VENV35)
	$(PY35) -m pip install -q --upgrade pip
	PYICEBERG_CRYPTO_SKIP_JAR_BUILD=1 $(PY35) -m pip install -q --no-compile -c $(CONSTRAINTS35) -e '.[test]'
	touch $@

# The production bridge jar (into the package) and the test kit jar (jars/target), one Maven run.
jars: $(BRIDGE_JAR) $(TESTKIT_JAR) $(TESTING_JAR)

$(BRIDGE_JAR) $(TESTKIT_JAR) $(TESTING_JAR) &: $(JAVA_SOURCES)
	$(PYTHON) jars/build_bridge.py --testkit

runtime-jars: $(RUNTIME_JARS)/.complete

$(RUNTIME_JARS)/.complete: pyiceberg_crypto/jars.py pyiceberg_crypto/testing/jars.py | venv
	$(VENV)/bin/pyiceberg-crypto jars download $(RUNTIME_JARS) --spark 3.5 --spark 4.1 --aws --kafka --comet
	$(PY) -m pyiceberg_crypto.testing jars $(RUNTIME_JARS) --kafka-broker --rest-catalog
	touch $@

demo: setup
	$(VENV)/bin/pyiceberg-crypto demo

# Jar sets resolved by Maven (the same Maven that builds the bridge jar), each from a pom that only
# lists dependencies: `mvn dependency:copy-dependencies` into .cache/NAME, once; offline afterwards.
# One rule for all of them (a new set: a pom, a directory, a line below).
#   trino-jars: Trino 483 in one JVM for tests/trino (Java 25, which these machines ship under
#     /usr/lib/jvm beside Java 17; pyiceberg_crypto/testing/trino.py finds it): ~475 jars (~510 MB).
#   yarn-jars: a YARN ResourceManager and NodeManager (Hadoop 3.4.2, pyspark's Hadoop client) for
#     the YARN cluster in network namespaces (pyiceberg_crypto/testing/yarn.py): ~140 jars (~80 MB).
TRINO_JARS := .cache/trino
YARN_JARS := .cache/yarn
export PYICEBERG_CRYPTO_TRINO_JARS := $(CURDIR)/$(TRINO_JARS)
export PYICEBERG_CRYPTO_YARN_JARS := $(CURDIR)/$(YARN_JARS)
trino-jars: $(TRINO_JARS)/.complete
yarn-jars: $(YARN_JARS)/.complete

$(TRINO_JARS)/.complete: tests/trino/pom.xml
$(YARN_JARS)/.complete: tests/cluster/yarn/pom.xml
$(TRINO_JARS)/.complete $(YARN_JARS)/.complete:
	rm -rf $(@D)
	mvn -q -B -f $< dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(CURDIR)/$(@D)
	touch $@

# The network-namespace cluster tests (tests/cluster) need iptables (a firewall rule in one node)
# and tcpdump (what crosses the bridge), the audit page's browser test (tests/audit/test_audit_html.py)
# a headless chromium, all from Debian's packages. Installed when missing and this is
# root with apt-get (CI, the project's machines); elsewhere those tests skip and say why.
SYSTEM_PACKAGES := iptables tcpdump chromium
system-packages:
	@missing=$$(for p in $(SYSTEM_PACKAGES); do command -v $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing $$missing (Debian packages, for tests/cluster and the browser test)"; \
		apt-get install -y -q --no-install-recommends $$missing >/dev/null || \
		{ apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends $$missing >/dev/null; }; \
	else echo "not installing $$missing (needs root and apt-get): the tests that need them will skip"; fi

# Four lanes at once, each printed when done (fails if any fails). Most of the suite waits on JVMs
# starting, so on 2 cores they overlap well:
#   - the Spark 3.5 spine (-m spine on .venv-spark3.5), then the tests that start Spark applications
#     of their own (-m apps: Connect / Thrift servers, spark-submit jobs, spark-pipelines, streaming
#     drivers killed and restarted, Trino reading what Spark wrote) on Spark 4.1;
#   - the namespace clusters (-m cluster: Spark standalone, then YARN) and the local-cluster
#     applications (-m executors: executors in JVMs of their own, on one host);
#   - the newcomer tests (-m newcomer: wheels installed into fresh environments, the docs walk that
#     runs the pages from the installed wheel);
#   - everything else on Spark 4.1.
# What only one lane needs is set up inside that lane, while the others already run: the Spark 3.5
# environment (~1 min of pip) and Trino's jars in the spine's lane, the docs site (`make docs`, its
# build is a test too) and YARN's jars in the cluster lane (each lane's log shows it). The wheels the
# cluster and newcomer lanes install are built once, in the background as the lanes start (`make
# dist` into $(TEST_DIST), its output in $(TEST_DIST_LOG)): the tests' `dist` fixture, told by
# PYICEBERG_CRYPTO_TEST_DIST and PYICEBERG_CRYPTO_TEST_DIST_STATUS, waits for the status file the
# build leaves there, so two lanes never build at once and the main lane, which installs no wheel,
# starts at once. Each pytest process has its own --basetemp, so their temporary directories never
# collide, and its own .cache/junit-LANE.xml: every test's time, to see where a lane's minutes go.
# Each user's own temporary directories (a fixed /tmp path made by another user could not be reused).
TEST_TMP := /tmp/pyiceberg-crypto-test-$(shell id -u)
SPARK35_LOG := .cache/test-spark3.5.log
APPS_LOG := .cache/test-apps.log
CLUSTER_LOG := .cache/test-cluster.log
NEWCOMER_LOG := .cache/test-newcomer.log
# The cluster lane also takes the tests marked `processes` (Spark applications of their own beside
# loopback servers, no session driver) and `balance` (the adopt tests, the concurrent and branch
# re-encryption, the lake audit, the service's governance, on a session driver of that lane's own): that lane ends minutes before the main
# one, which sets the time.
CLUSTER_LANE := cluster or executors or processes or balance
MULTIHOST := $(CLUSTER_LANE) or newcomer
TEST_DIST := .cache/test-dist
TEST_DIST_LOG := .cache/test-dist.log
TEST_DIST_STATUS := $(TEST_DIST)/.make-dist-status
# A class-data sharing archive of the project environment's Spark driver (tests/jvm_archive.py),
# made in the background while the wheel is built and the lanes start (~40 s; its log is printed
# last): the tests' Spark drivers map the classes of Spark, Hive and Iceberg from it, parsed and
# verified, instead of loading them (a short driver's CPU: 13-14 s without, 5.5 s with). A driver
# started before it is there, or that it does not match (another pyspark, a rebuilt jar), runs
# without it; tests/test_jvm_archive.py (in the apps lane, which starts last) waits for it and
# checks a driver maps its classes from it.
JVM_ARCHIVE := .cache/jvm/spark.jsa
JVM_ARCHIVE_LOG := .cache/jvm-archive.log
jvm-archive: $(JVM_ARCHIVE)

$(JVM_ARCHIVE): tests/jvm_archive.py $(VENV)/.installed $(BRIDGE_JAR) $(RUNTIME_JARS)/.complete
	$(PY) -m tests.jvm_archive $@

# Bytecode of every lane goes to PYCACHE, as the unit lane's does (see test-fast below).
test: setup system-packages
	@mkdir -p .cache
	@$(MAKE) --no-print-directory jvm-archive > $(JVM_ARCHIVE_LOG) 2>&1 &
	@rm -rf $(TEST_DIST) && { $(MAKE) --no-print-directory dist DIST_DIR=$(TEST_DIST) > $(TEST_DIST_LOG) 2>&1; \
		status=$$?; mkdir -p $(TEST_DIST) && echo $$status > $(TEST_DIST_STATUS); } &
	export PYICEBERG_CRYPTO_TEST_DIST=$(CURDIR)/$(TEST_DIST) PYICEBERG_CRYPTO_TEST_DIST_STATUS=$(CURDIR)/$(TEST_DIST_STATUS) \
		PYICEBERG_CRYPTO_TEST_JVM_ARCHIVE=1 PYTHONPYCACHEPREFIX="$(PYCACHE)"; unset PYTHONDONTWRITEBYTECODE; \
	{ $(MAKE) --no-print-directory setup-spark3.5 trino-jars > $(SPARK35_LOG) 2>&1 && \
	  $(PY35) -m pytest -m spine -p no:cacheprovider --basetemp=$(TEST_TMP)-3.5 --junitxml=.cache/junit-spark3.5.xml $(PYTEST_ARGS) \
		>> $(SPARK35_LOG) 2>&1; spine=$$?; \
	  PYICEBERG_CRYPTO_REQUIRE_TRINO=1 $(PY) -m pytest -m 'apps and not ($(MULTIHOST))' -p no:cacheprovider \
		--basetemp=$(TEST_TMP)-apps --junitxml=.cache/junit-apps.xml \
		$(PYTEST_ARGS) > $(APPS_LOG) 2>&1 && exit $$spine; } & lane3=$$!; \
	{ $(MAKE) --no-print-directory docs yarn-jars > $(CLUSTER_LOG) 2>&1 && \
	  $(PY) -m pytest -m '($(CLUSTER_LANE)) and not newcomer' -p no:cacheprovider --basetemp=$(TEST_TMP)-cluster --junitxml=.cache/junit-cluster.xml \
		$(PYTEST_ARGS) >> $(CLUSTER_LOG) 2>&1; } & cluster=$$!; \
	$(PY) -m pytest -m newcomer -p no:cacheprovider --basetemp=$(TEST_TMP)-newcomer --junitxml=.cache/junit-newcomer.xml \
		$(PYTEST_ARGS) > $(NEWCOMER_LOG) 2>&1 & newcomer=$$!; \
	status=0; \
	$(PY) -m pytest -m 'not ($(MULTIHOST) or apps)' --basetemp=$(TEST_TMP)-main --junitxml=.cache/junit-main.xml $(PYTEST_ARGS) || status=1; \
	wait $$newcomer || status=1; \
	echo "======== newcomer tests and the docs walk, Spark 4.1 ($(NEWCOMER_LOG)) ========"; cat $(NEWCOMER_LOG); \
	wait $$cluster || status=1; \
	echo "======== namespace clusters, Spark 4.1 ($(CLUSTER_LOG)) ========"; cat $(CLUSTER_LOG); \
	wait $$lane3 || status=1; \
	echo "======== Spark 3.5 spine ($(SPARK35_LOG)) ========"; cat $(SPARK35_LOG); \
	echo "======== own Spark applications, Spark 4.1 ($(APPS_LOG)) ========"; cat $(APPS_LOG); \
	echo "======== the wheels the lanes install ($(TEST_DIST_LOG)) ========"; cat $(TEST_DIST_LOG); \
	echo "======== the JVM archive ($(JVM_ARCHIVE_LOG)) ========"; cat $(JVM_ARCHIVE_LOG); \
	exit $$status

# The unit lane (under 3 min on 2 cores: docs/how-to/develop.md, "The unit lane's time"): every
# test that starts no JVM (-m 'not jvm', tests/conftest.py), run with no java on PATH and no
# JAVA_HOME, so a test that needs one fails loudly instead of passing here by luck. Needs the venv only: no jars, no Maven, no Java. The vectors Java made are committed
# (tests/formats/fixtures/java); `make test` checks them against Java again. Without the built jars
# (make jars) the tests that read them (-m jars) skip, saying so; without the pinned ones (make
# runtime-jars) PYICEBERG_CRYPTO_JARS is left unset: the builders then name Maven coordinates, and
# the two tests of the downloaded jars skip, saying so.
#
# Bytecode goes to PYCACHE (gitignored), also where PYTHONDONTWRITEBYTECODE is set (as in many
# containers): the venv is installed --no-compile, so without it each of the ~130 Python processes
# the lane starts (kms serve, the console script, attackers) compiled every module it imported, and
# pytest rewrote and compiled the ~240 test modules, at every run: 11 s of collecting, ~60 CPU-s.
# The first run fills it (~20 CPU-s); nothing is written beside the sources or into the venv.
NO_JAVA_BIN := .cache/no-java-bin
PYCACHE := $(CURDIR)/.cache/pycache
test-fast: venv
	@path=$$($(PY) -m tests.path_without_java $(NO_JAVA_BIN)) && \
	if [ -f $(RUNTIME_JARS)/.complete ]; then jars=; else jars="-u PYICEBERG_CRYPTO_JARS"; fi && \
	env -u JAVA_HOME -u PYTHONDONTWRITEBYTECODE $$jars PATH="$$path" PYTHONPYCACHEPREFIX="$(PYCACHE)" $(PY) -m pytest -m 'not (jvm or system_packages)' -p no:cacheprovider \
		--basetemp=$(TEST_TMP)-fast $(PYTEST_ARGS)

# The fuzzing harness's long run (tests/fuzz, README "Security design"): random, FUZZ_EXAMPLES
# examples per property (~20 min on 2 cores), failures kept in .cache/hypothesis. `make test`
# runs the same properties with a short, derandomized profile.
FUZZ_EXAMPLES ?= 1000
fuzz: setup
	PYICEBERG_CRYPTO_FUZZ=1 PYICEBERG_CRYPTO_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest tests/fuzz -p no:cacheprovider \
		--hypothesis-show-statistics $(PYTEST_ARGS)

test-spark3.5: setup-spark3.5
	$(PY35) -m pytest -m spine -p no:cacheprovider $(PYTEST_ARGS)

# Benchmarks (bench/README.md): full sizes write bench/RESULTS.md (~20 min on 2 cores); quick
# sizes print the same tables in < 3 minutes (data in the gitignored bench/.data/).
bench: setup yarn-jars
	$(PY) -m bench.run

bench-quick: setup
	$(PY) -m bench.run --quick

# The documentation site (mkdocs.yml, docs/): every warning is an error (broken links and anchors,
# pages missing from the nav, docstrings mkdocstrings cannot read); nothing is fetched at build time.
# About 10 s; `make test` builds it in its cluster lane. tests/docs checks the code blocks of the pages.
docs: venv
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

# The sdist and the wheel, as any user's `python -m build` makes them: in build's own isolated
# environment (setuptools from the index), the bridge jar built by Maven in setup.py's hook. The
# only thing installed for it is `build` (pinned in constraints/), in a small venv of its own: not the
# 1.8 GB development environment. DIST_DIR=... puts them elsewhere (the tests build into a temp dir).
DIST_DIR ?= dist
BUILD_VENV := .cache/build-venv
BUILD_PY := $(BUILD_VENV)/bin/python

$(BUILD_VENV)/.installed: $(CONSTRAINTS)
	test -d $(BUILD_VENV) || $(PYTHON) -m venv $(BUILD_VENV)
	$(BUILD_PY) -m pip install -q -c $(CONSTRAINTS) build
	touch $@

dist: $(BUILD_VENV)/.installed
	rm -rf $(DIST_DIR)
	$(BUILD_PY) -m build --outdir $(DIST_DIR) .
	$(BUILD_PY) -m build --wheel --outdir $(DIST_DIR) testkit

clean:
	rm -rf $(VENV) $(VENV35) jars/target $(BRIDGE_JAR) .cache .pytest_cache demo-warehouse dist build site
