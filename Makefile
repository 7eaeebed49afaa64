# agent-ab-kit. Two commands on a fresh machine (Python 3.11 + pip): `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.kit-installed
TOOLS  := .tools
CODEX_VERSION  ?= 0.169.0
CLAUDE_VERSION ?= 2.1.328

.PHONY: install demo test test-all lint e2e-tools e2e-tools-if-reachable clean-outputs

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	@touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/python -m kit batch -f params/demo.yaml

test: install e2e-tools-if-reachable
	$(BIN)/python -m pytest -q -n 2

test-all: install e2e-tools-if-reachable
	$(BIN)/python -m pytest -q -n 2 -m "slow or not slow"

lint: install
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

# The real Codex CLI and Claude Code, pinned, into a git-ignored folder (tests skip without them).
e2e-tools:
	@mkdir -p $(TOOLS)
	cd $(TOOLS) && npm install --no-audit --no-fund --loglevel=error \
		@openai/codex@$(CODEX_VERSION) @anthropic-ai/claude-code@$(CLAUDE_VERSION)

# For `make test`: install the CLIs when npm can reach its registry; otherwise say why and go on
# (the end-to-end tests then skip, naming the missing binaries).
e2e-tools-if-reachable:
	@if [ -x $(TOOLS)/node_modules/.bin/codex ] && [ -x $(TOOLS)/node_modules/.bin/claude ]; then :; \
	elif ! command -v npm >/dev/null; then echo "e2e-tools: npm not found; CLI end-to-end tests will skip"; \
	else $(MAKE) --no-print-directory e2e-tools || echo "e2e-tools: npm could not install the CLIs; CLI end-to-end tests will skip"; fi

clean-outputs:
	find outputs -mindepth 1 -maxdepth 1 ! -name examples -exec rm -rf {} +
