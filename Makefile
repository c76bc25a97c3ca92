# Two commands on a fresh machine:
#   make serve   set everything up, serve the embedded demo (SQLite) on :8000 and print a token
#   make test    set everything up and run the whole test suite (SQLite and PostgreSQL)
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: serve test setup postgres nginx bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	@if [ -f ../shared/conformance/requirements.txt ]; then $(BIN)/pip install --quiet -r ../shared/conformance/requirements.txt; fi
	touch $(STAMP)

setup: $(STAMP)

serve: $(STAMP)
	$(BIN)/orgunit-fhir serve $(ARGS)

postgres:
	@pg_isready -h 127.0.0.1 -p 5432 -q || pg_ctlcluster --skip-systemctl-redirect $$(ls /etc/postgresql | tail -n 1) main start
	@for i in $$(seq 1 40); do pg_isready -h 127.0.0.1 -p 5432 -q && exit 0; sleep 0.25; done; echo "PostgreSQL did not start"; exit 1

# tests/test_deployment.py runs a real nginx (the Debian package) in front of the server
nginx:
	@PATH="$$PATH:/usr/sbin" command -v nginx >/dev/null 2>&1 || { \
	  echo "installing nginx (Debian package) for tests/test_deployment.py"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nginx >/dev/null; }
	@PATH="$$PATH:/usr/sbin" command -v nginx >/dev/null 2>&1 || { echo "nginx could not be installed (run as root on Debian)"; exit 1; }

test: $(STAMP) postgres nginx
	$(BIN)/pytest -q

bench: $(STAMP) postgres
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) var .pytest_cache *.egg-info
