"""Task pack ``batch-read``: a read-heavy investigation whose reads are independent (codex-batch-bench).

The fixture is a frozen synthetic Python repository: 12 pipeline modules, ``config/defaults.toml``
and ``MANIFEST.txt`` (presets ``small`` and ``large``). The prompt asks for a per-module table
(public functions, config keys read, imports) and the config keys no module reads. After the
manifest, every file read is known-independent: the ideal workload for issuing reads together.

Arms (docs/method.md#controls): ``placebo`` (a length-matched, style-only instruction) and ``batching``
(an instruction to issue independent reads together, Promise.allSettled-style).

True effect of the scripted policy (the analysis must recover it): on each cycle with reads
pending, the model issues *all* remaining independent reads in one response with probability
``p_batch`` (default 0.9) when the batching instruction is in its context, ``q_batch`` (default
0.15) otherwise; otherwise it reads one file. Everything else (answer, reasoning) is identical,
so the arms differ in cycles and therefore in re-sent prompt tokens, not in quality.

Codex with Code Mode (``backend_options: {code_mode: true}``, kit/agents/codex.py) offers the ``exec``
tool, and the policy reads through its cells: one ``tools.exec_command`` call per cell when it reads one
file, one cell with ``Promise.all`` over every pending read when it reads them together. The same draw
decides, so on Codex the batch measures codex-batch-bench's mechanism (docs/method.md#sources) as calls
per cell. A cell's outputs share one budget in Codex's context (kit/tasks/tooluse.py ``cell_reads``): once
a cell came back cut, the policy puts only as many reads in a cell as came through whole, and reads the
cut ones again.

On a user's repository (``repo: PATH``, run-real) the arms' instructions go to the developer
instructions (``-c developer_instructions=…`` on Codex, ``--append-system-prompt`` on Claude Code),
not to an AGENTS.md / CLAUDE.md in the working copy: the repository's own files stay as they are.
"""

from __future__ import annotations

import ast
import random
import re
import tomllib
from dataclasses import dataclass, field

from kit.errors import InputError
from kit.experiment.design import Arm, Placement
from kit.jsontypes import PackFacts
from kit.provider.policy import Conversation, Reply, ToolCall
from kit.tasks import tooluse, userrepo
from kit.tasks.base import Grade
from kit.tasks.repo_pack import RepoFixture

MODULES = (
    "ingest", "normalize", "dedupe", "enrich", "validate", "score",
    "rank", "export", "audit", "notify", "archive", "summarize",
)  # fmt: skip
IMPORTS = ("json", "re", "math", "hashlib", "itertools", "statistics", "datetime", "pathlib", "csv", "collections")
KEY_WORDS = ("timeout_s", "max_retries", "window_days", "threshold", "sample_rate", "limit", "precision", "mode")
VERBS = ("load", "parse", "merge", "compute", "filter", "emit", "check", "collect", "apply", "render")
PRESETS = {"small": 6, "large": 40}  # filler helper functions per module

PROMPT = (
    "Investigate the Python project in the current directory. For every pipeline module listed in "
    "MANIFEST.txt, report its public functions, the config keys it reads from config/defaults.toml, and the "
    "modules it imports, as a markdown table with one row per module (columns: module, public functions, "
    "config keys, imports). Then list, under a heading 'Unused config keys', every key defined in "
    "config/defaults.toml that no module reads."
)
BATCHING = (
    "When several reads or searches are independent of each other, issue them together in a single step "
    "instead of one after another, the way Promise.allSettled starts every promise before awaiting any: "
    "decide the full set of files you need, request all of them at once, then work from the combined results. "
    "Only serialize steps whose inputs depend on an earlier result."
)
PLACEBO = (
    "Write in a calm, neutral register. Prefer short declarative sentences and plain words over jargon, and keep "
    "formatting consistent: use markdown tables where the answer is tabular, backticks for identifiers, and one "
    "blank line between sections. Avoid filler, hedging and exclamation marks, and keep headings in sentence "
    "case so the answer reads as one document."
)
MARKER = "Promise.allSettled"
REPO_PROMPT = (
    "Investigate the Python modules in the current directory. For every module, report its public functions, "
    "the configuration keys it reads, and the modules it imports, as a markdown table with one row per module "
    "(columns: module, public functions, config keys, imports)."
)


@dataclass(frozen=True)
class ModuleTruth:
    name: str
    functions: tuple[str, ...]
    keys: tuple[str, ...]
    imports: tuple[str, ...]


@dataclass(frozen=True)
class Fixture:
    """The generated repository as data: files by path and the ground truth."""

    files: dict[str, str]
    modules: tuple[ModuleTruth, ...]
    unused_keys: tuple[str, ...]


def generate(seed: int = 0, preset: str = "small") -> Fixture:
    """The repository for (seed, preset), byte-for-byte deterministic."""
    if preset not in PRESETS:
        raise InputError(f"preset {preset!r}; accepted: {sorted(PRESETS)}")
    rng = random.Random(f"batch-read|{seed}|{preset}")
    truths: list[ModuleTruth] = []
    files: dict[str, str] = {}
    all_keys: list[str] = []
    for name in MODULES:
        keys = tuple(sorted(f"{name}_{w}" for w in rng.sample(KEY_WORDS, rng.randint(2, 3))))
        imports = tuple(sorted(rng.sample(IMPORTS, rng.randint(2, 4))))
        functions = tuple(sorted({f"{v}_{name}" for v in rng.sample(VERBS, rng.randint(2, 4))}))
        files[f"pipeline/{name}.py"] = _module_source(name, functions, keys, imports, PRESETS[preset], rng)
        truths.append(ModuleTruth(name, functions, keys, imports))
        all_keys.extend(keys)
    unused = tuple(sorted(f"{w}_{n}" for w, n in zip(rng.sample(KEY_WORDS, 6), rng.sample(MODULES, 6), strict=True)))
    files["config/defaults.toml"] = _config(sorted(all_keys) + list(unused), rng)
    files["MANIFEST.txt"] = _manifest()
    return Fixture(files, tuple(truths), unused)


def _module_source(name, functions, keys, imports, n_filler, rng) -> str:
    lines = [f'"""Pipeline stage: {name}."""', "", *(f"import {m}" for m in imports), "", ""]
    key_iter = iter(keys)
    for i, fn in enumerate(functions):
        key = next(key_iter, None)
        lines += [f"def {fn}(records, cfg):", f'    """{fn.replace("_", " ").capitalize()} for the {name} stage."""']
        lines += [f'    limit = cfg.get("{key}")'] if key else ["    limit = None"]
        lines += [f"    return [_step_{i}(r, limit) for r in records]", "", ""]
    for key in key_iter:  # keys beyond the number of public functions are read by a private helper
        lines += ["def _settings(cfg):", f'    return cfg["{key}"]', "", ""]
    for i in range(max(len(functions), n_filler)):
        a, b = rng.randint(2, 97), rng.randint(2, 97)
        lines += [
            f"def _step_{i}(record, limit):",
            f"    value = (hash(str(record)) * {a} + {b}) % 1000",
            "    return value if limit is None else min(value, limit)",
            "",
            "",
        ]
    return "\n".join(lines).rstrip() + "\n"


def _config(keys: list[str], rng: random.Random) -> str:
    body = ["# Default configuration for the pipeline.", ""]
    body += [f"{k} = {rng.randint(1, 500)}" for k in sorted(keys)]
    return "\n".join(body) + "\n"


def _manifest() -> str:
    lines = ["Project files:", "", "config/defaults.toml  - default configuration"]
    lines += [f"pipeline/{m}.py  - {m} stage" for m in MODULES]
    return "\n".join(lines) + "\n"


def answer_from(contents: dict[str, str]) -> str:
    """The final answer a careful agent writes from what it read (so grading is real)."""
    rows, read_keys = [], set()
    for name in MODULES:
        source = contents.get(f"pipeline/{name}.py")
        if source is None:
            continue
        functions, keys, imports = analyse_module(source)
        read_keys |= set(keys)
        rows.append(f"| {name} | {', '.join(functions)} | {', '.join(keys)} | {', '.join(imports)} |")
    config = contents.get("config/defaults.toml", "")
    try:
        defined = set(tomllib.loads(config))
    except tomllib.TOMLDecodeError:
        defined = set()
    unused = sorted(defined - read_keys)
    table = ["| module | public functions | config keys | imports |", "|---|---|---|---|", *rows]
    return "\n".join([*table, "", "## Unused config keys", "", *(f"- `{k}`" for k in unused)]) + "\n"


def analyse_module(source: str) -> tuple[list[str], list[str], list[str]]:
    """Public functions, config keys read and imports of one module's source."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return [], [], []
    functions = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")]
    imports = sorted({a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names})
    keys = sorted(set(re.findall(r"""cfg(?:\.get\(|\[)["']([A-Za-z0-9_]+)["']""", source)))
    return functions, keys, imports


def grade(answer: str, fixture: Fixture) -> Grade:
    """Modules named (n/12) and true unused keys found (n/6), from the final answer (docs/method.md#grading)."""
    table_part, _, unused_part = answer.partition("Unused config keys")
    named = [m.name for m in fixture.modules if re.search(rf"^\|\s*{m.name}\s*\|", table_part, re.MULTILINE)]
    listed = set(re.findall(r"[A-Za-z0-9_]+", unused_part))
    found = [k for k in fixture.unused_keys if k in listed]
    score = (len(named) / len(fixture.modules) + len(found) / len(fixture.unused_keys)) / 2
    detail = f"modules {len(named)}/{len(fixture.modules)}, unused keys {len(found)}/{len(fixture.unused_keys)}"
    return Grade(round(score, 4), detail)


# What a reader of a batch-read ratio must know (codex-batch-bench's own caveat): said in every fixture batch's
# warnings, not on a user's repository, whose reads are as dependent as they are.
CAVEAT = (
    "task: after MANIFEST.txt every read of the batch-read fixture is independent, the maximally batchable task, "
    "so the batching arm's saving is an upper bound for real work, where reads depend on what earlier ones showed"
)


@dataclass
class BatchReadPolicy:
    """The scripted coding agent for this pack (see the module docstring for its true effect)."""

    p_batch: float = 0.9
    q_batch: float = 0.15
    name: str = "batch-read"
    paths: tuple[str, ...] = field(default=("config/defaults.toml", *(f"pipeline/{m}.py" for m in MODULES)))

    def reply(self, conv: Conversation) -> Reply:
        rng = conv.rng("batch-read")
        reasoning = rng.randint(16, 96)
        if not tooluse.can_read(conv):
            return Reply(text="I have no tool to read files here, so I cannot inspect the project.")
        contents = tooluse.file_contents(conv)
        if "MANIFEST.txt" not in contents:
            if tooluse.failed_reads(conv).get("MANIFEST.txt", 0) >= 2:  # a real agent gives up, not loops
                return Reply("I could not read MANIFEST.txt, so I cannot inspect the project.", (), reasoning)
            return Reply("Reading the manifest first.", _reads(conv, ["MANIFEST.txt"]), reasoning)
        listed = [p for p in self.paths if p in contents["MANIFEST.txt"]]
        pending = [p for p in listed if p not in contents]
        if not pending:
            return Reply(answer_from(contents), (), reasoning)
        together = rng.random() < (self.p_batch if MARKER in conv.all_text() else self.q_batch)
        chosen = pending[: tooluse.cell_capacity(conv)] if together else pending[:1]
        return Reply(f"Reading {', '.join(chosen)}.", _reads(conv, chosen), reasoning)


def _reads(conv: Conversation, paths: list[str]) -> tuple[ToolCall, ...]:
    """The calls that read ``paths`` in one response: one Code Mode cell where Codex offers ``exec``."""
    if tooluse.code_mode(conv):
        return (tooluse.read_cell(paths),)
    return tuple(tooluse.read_call(conv, p) for p in paths)


@dataclass
class BatchReadPack(RepoFixture):
    """The pack object the run stage uses (see the module docstring)."""

    generator = staticmethod(generate)

    seed: int = 0
    preset: str = "small"
    p_batch: float = 0.9
    q_batch: float = 0.15
    repo: str | None = None  # run-real: the user's repository (read-only copy) instead of the fixture
    globs: list[str] = field(default_factory=list)
    prompt: str | None = None  # replaces the question (e.g. for a user repository)
    name: str = "batch-read"

    def __post_init__(self) -> None:
        self._repo = userrepo.optional(self.repo, self.globs)

    @property
    def caveat(self) -> str | None:
        """What the batch's ratio cannot say (the run stage puts it in the warnings): the fixture's, not a
        user repository's or a custom prompt's."""
        return None if self._repo is not None or self.prompt else CAVEAT

    @property
    def true_effect(self) -> str:
        return (
            f"batching issues all pending independent reads in one response with p={self.p_batch} per cycle, "
            f"placebo with q={self.q_batch}; otherwise one read per response; answers identical"
        )

    def arms(self) -> dict[str, Arm]:
        """The fixture's arms write AGENTS.md / CLAUDE.md; a user repository's keep its own (module docstring)."""
        placement: Placement = userrepo.PLACEMENT if self._repo is not None else "agents_file"
        return {
            "placebo": Arm("placebo", PLACEBO, placement=placement, description="length-matched style-only"),
            "batching": Arm("batching", BATCHING, placement=placement, description="batch independent reads"),
        }

    def prompts(self) -> list[str]:
        return [self.prompt or (REPO_PROMPT if self._repo else PROMPT)]

    def prompts_for(self, run: int) -> list[str]:
        return self.prompts()

    def grade_for(self, run: int, answer: str) -> Grade:
        return self.grade(answer)

    def policy(self) -> BatchReadPolicy:
        return BatchReadPolicy(self.p_batch, self.q_batch)

    def grade(self, answer: str) -> Grade:
        if self._repo is not None or self.prompt:
            return userrepo.NO_TRUTH if self._repo is not None else Grade(None, "no ground truth for a custom prompt")
        return grade(answer, self.fixture())

    def describe(self) -> PackFacts:
        if self._repo is not None:
            base = {"task": self.name, "p_batch": self.p_batch, "q_batch": self.q_batch, "prompt": self.prompts()[0]}
            return {**base, "true_effect": self.true_effect, **self._repo.describe()}
        return self.describe_repo(
            {
                "task": self.name,
                "seed": self.seed,
                "preset": self.preset,
                "p_batch": self.p_batch,
                "q_batch": self.q_batch,
                "true_effect": self.true_effect,
            }
        )
