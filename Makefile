# agent-ab-kit. Two commands on a fresh machine (Python 3.11 + pip): `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.kit-installed
TOOLS  := .tools
CODEX_VERSION  ?= 0.169.0
CLAUDE_VERSION ?= 2.1.328

.PHONY: install demo test test-all lint e2e-tools e2e-tools-if-reachable browser-tools browser-tools-if-reachable \
	examples clean-outputs

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	@touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/python -m kit batch -f params/demo.yaml

test: install e2e-tools-if-reachable browser-tools-if-reachable
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

test-all: install e2e-tools-if-reachable browser-tools-if-reachable
	$(BIN)/python -m pytest -q -n 2 --dist loadfile -m "slow or not slow"

# Ruff, then the type checker (its settings: [tool.mypy] in pyproject.toml).
lint: install
	$(BIN)/ruff check . && $(BIN)/ruff format --check . && $(BIN)/mypy

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

# Debian's headless Chromium, for the browser check of the report and the notebook HTML (tests/e2e/test_browser.py).
browser-tools:
	@if [ -x /usr/bin/chromium ]; then :; \
	else apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; fi

# For `make test`: install Chromium when apt can; otherwise say why and go on (the browser test then skips).
browser-tools-if-reachable:
	@if [ -x /usr/bin/chromium ]; then :; \
	elif ! command -v apt-get >/dev/null; then echo "browser-tools: apt-get not found; the browser test will skip"; \
	else $(MAKE) --no-print-directory browser-tools || echo "browser-tools: apt could not install chromium; the browser test will skip"; fi

# One committed example batch per task pack (every params/*.yaml) into outputs/examples/<task>/: seeded, one
# trial at a time, each folder rebuilt from scratch (a same-named batch would resume), then made lean
# (kit/cli/examples.py). The batch salt is random, so token counts move a little on each rebuild.
EXAMPLE_RUNS   ?= 5
EXAMPLE_PARAMS ?= $(wildcard params/*.yaml)
examples: install
	@set -e; for f in $(EXAMPLE_PARAMS); do \
		task=$$(sed -n 's/^task: *\([A-Za-z0-9_.-]*\).*/\1/p' $$f); \
		rm -rf outputs/examples/$$task; \
		echo "examples: $$f -> outputs/examples/$$task"; \
		$(BIN)/python -m kit batch -f $$f -p batch $$task -p outputs_dir outputs/examples \
			-p runs_per_arm $(EXAMPLE_RUNS) -p concurrency 1 -p salt example-$$task; \
	done
	$(BIN)/python -m kit.cli.examples outputs/examples
	@du -sh outputs/examples

# bench/parse.py (parse speed: cold, warm cache, 1% grown) against its peers, pinned, installed first into a
# git-ignored folder of their own (its package.json keeps npm from
# using the one in .tools/): ccusage's native binary (`ccusage session`, `ccusage codex session`) and the last
# working release of @ccusage/codex (19.0.0 is a stub that says "use npx ccusage").
CCUSAGE_VERSION ?= 20.0.24
CCUSAGE_CODEX_VERSION ?= 18.0.11
.PHONY: bench-peers
bench-peers:
	@mkdir -p $(TOOLS)/bench-peers
	@test -f $(TOOLS)/bench-peers/package.json || echo '{"private": true}' > $(TOOLS)/bench-peers/package.json
	cd $(TOOLS)/bench-peers && npm install --save-exact --no-audit --no-fund --loglevel=error \
		ccusage@$(CCUSAGE_VERSION) @ccusage/ccusage-linux-x64@$(CCUSAGE_VERSION) @ccusage/codex@$(CCUSAGE_CODEX_VERSION)
	chmod +x $(TOOLS)/bench-peers/node_modules/@ccusage/ccusage-linux-x64/bin/ccusage
	nice $(BIN)/python bench/parse.py

clean-outputs:
	find outputs -mindepth 1 -maxdepth 1 ! -name examples -exec rm -rf {} +
