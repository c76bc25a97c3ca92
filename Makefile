# Two commands on a fresh machine:
#   make serve   install the server (not the test tools), create the embedded demo database (SQLite, var/orgunits.db)
#                when there is none, serve it on :8000 and print a token
#   make test    set everything up and run the whole test suite (SQLite and PostgreSQL);
#                ARGS="..." passes options to pytest, e.g. make test ARGS="tests/orgunits -x"
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
RUNTIME := $(VENV)/.runtime
STAMP  := $(VENV)/.installed
# the shared material the suite reads (the real data, the independent checker): beside the checkout by default
SHARED ?= ../shared
override SHARED := $(abspath $(SHARED))
export SHARED

.PHONY: serve test setup shared postgres nginx authserver chromium bench bench-export bench-sync bench-explorer bench-check-data clean

# the server alone (what `make serve` needs)
$(RUNTIME): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -e .
	touch $(RUNTIME)

# everything the tests need besides: the test extras and the conformance checker's requirements
$(STAMP): $(RUNTIME) | shared
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	$(BIN)/pip install --quiet -r $(SHARED)/conformance/requirements.txt
	touch $(STAMP)

# the suite needs the shared material: said at once, not as hundreds of missing files
shared:
	@[ -d "$(SHARED)/data/real" ] && [ -f "$(SHARED)/conformance/requirements.txt" ] || { \
	  echo "make: the shared material (data/real, conformance) is not at $(SHARED): put it beside the checkout (../shared) or set SHARED=/its/path" >&2; exit 2; }

setup: $(STAMP)

serve: $(RUNTIME)
	$(BIN)/orgunit-fhir serve --demo $(ARGS)

postgres:
	@pg_isready -h 127.0.0.1 -p 5432 -q || pg_ctlcluster --skip-systemctl-redirect $$(ls /etc/postgresql | tail -n 1) main start
	@for i in $$(seq 1 40); do pg_isready -h 127.0.0.1 -p 5432 -q && exit 0; sleep 0.25; done; echo "PostgreSQL did not start"; exit 1

# tests/access/test_smart_authserver.py runs a real OAuth authorization server (oidc-provider, pinned in
# tests/support/oidc/package-lock.json) on the machine's Node.js: npm ci into the git-ignored .cache/authserver
authserver: $(STAMP)
	@command -v npm >/dev/null 2>&1 || { \
	  echo "installing Node.js and npm (Debian packages) for the authorization server tests"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null; }
	$(BIN)/python -m tests.support.authserver install

# tests/test_deployment.py runs a real nginx (the Debian package) in front of the server
nginx:
	@PATH="$$PATH:/usr/sbin" command -v nginx >/dev/null 2>&1 || { \
	  echo "installing nginx (Debian package) for tests/test_deployment.py"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nginx >/dev/null; }
	@PATH="$$PATH:/usr/sbin" command -v nginx >/dev/null 2>&1 || { echo "nginx could not be installed (run as root on Debian)"; exit 1; }

# tests/html/test_browser.py drives Debian's chromium with playwright-core and audits every screen with axe-core
# (npm, pinned, in the git-ignored .cache/node)
PLAYWRIGHT := playwright-core@1.65.1
AXE := axe-core@4.14.1
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing chromium (Debian package) for tests/html/test_browser.py"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; }
	@command -v chromium >/dev/null 2>&1 || { echo "chromium could not be installed (run as root on Debian)"; exit 1; }
	@command -v npm >/dev/null 2>&1 || { \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null; }
	@grep -qs '"version": "$(lastword $(subst @, ,$(PLAYWRIGHT)))"' .cache/node/node_modules/playwright-core/package.json || \
	  npm install --prefix .cache/node --no-audit --no-fund --silent $(PLAYWRIGHT)
	@grep -qs '"version": "$(lastword $(subst @, ,$(AXE)))"' .cache/node/node_modules/axe-core/package.json || \
	  npm install --prefix .cache/node --no-audit --no-fund --silent $(AXE)

# the suite runs on JOBS pytest-xdist workers (3 by default), each test file whole on one worker (--dist loadfile), so a
# module's fixtures are built once; the files are handed out costliest first (tests/costs.json, kept in that order by
# --no-loadscope-reorder: tests/support/schedule.py), so the workers finish together: on two cores 12-13 minutes on
# fresh clones, setup included (2026-12-01: 12:55 for 9,288 tests; 15-17 the day before, when every command
# re-read each migration chain's revision files several times; slower machines of the same size have taken up to
# twice that; JOBS=4 was slower), one process (JOBS=0) longer. Every test passes with the machine so loaded: a time bound in a test proves a behaviour against what the
# wrong one would take, never how fast this machine is; each process serves on its own ports
JOBS ?= 3
test: shared $(STAMP) postgres nginx authserver chromium
	$(BIN)/pytest -q -n $(JOBS) --dist loadfile --no-loadscope-reorder $(ARGS)

bench: $(STAMP) postgres
	$(BIN)/python bench/run.py

# $export of the 1M-unit demo on PostgreSQL, end to end (bench/export.py; builds the database once, ~8 min)
bench-export: $(STAMP) postgres
	$(BIN)/python bench/export.py

# check-data on the 100,000-unit demo, on each backend (bench/check_data.py; builds its databases once)
bench-check-data: $(STAMP) postgres
	$(BIN)/python bench/check_data.py

# two operators reloading while a client follows the sync point, 3 rounds of 30 s on each backend (bench/sync.py)
bench-sync: $(STAMP) postgres
	$(BIN)/python bench/sync.py

# the explorer's screens in chromium on the 100,000-unit demo (bench/explorer.py; issue 40's targets)
bench-explorer: $(STAMP) chromium
	$(BIN)/python bench/explorer.py $(ARGS)

clean:
	rm -rf $(VENV) var .pytest_cache .cache *.egg-info
