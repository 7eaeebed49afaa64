"""Task pack ``occupancy`` (docs/method.md#occupancy): residual context occupancy over a three-turn resumed session.

The fixture is a small synthetic Python web framework (``relay``): requests are dispatched through a
middleware chain, unmatched routes fall back to a not-found handler, and routes are registered with
the global middleware prepended. Names and file placement of the key functions vary with the seed;
the rest of the code is seeded filler whose docstrings share the vocabulary, so searches are noisy.
The session asks three ``||``-chained questions, each later one resumed in the same session, so the
earlier turns' tool output stays in the window and is charged against the turns that follow:

1. how a request runs through the middleware chain (the function that runs it, and its file);
2. where the no-route (404) case is handled in that chain (the dispatcher and the not-found handler);
3. what to change so a per-route middleware runs before the global ones (registration and chain building).

Arms: ``explore`` offers the SDK agents' ``explore`` tool (dense, line-numbered definitions plus
references; ``Arm.tools``) with an instruction to use it; ``files`` has the plain read/grep tools with
a length-matched instruction to search and read files.

True effect of the scripted policy (the analysis must recover it): with an exploration tool offered,
each turn is answered from one ``explore`` call for the turn's concept (a second one for the found
symbol's references with probability ``p_second_explore``, default 0.5, or for another wording when
the first did not show what the answer needs); without it, each turn greps the turn's pattern, reads
the ``reads_first`` (default 2) files with most hits plus each further hit file with probability
``p_extra_read`` (default 0.35), then one more file at a time until the answer's facts are in view.
Files already in context from earlier turns are not read again. Answers are computed from what was
read and are equally correct in both arms; the arms differ in how many tool-result tokens stay
resident. Measured on the embedded provider (seed 0, 10 trials per arm, sdk-openai / sdk-anthropic):

- preset large: tool output resident at the end of the session 1.3k tokens with ``explore`` vs 12.3k
  with ``files`` (9.2x); final context 3.9x / 4.5x and total tokens 3.3x / 3.7x smaller with explore;
- preset small: resident 1.3k vs 2.8k (2.1x); final context 1.4x / 1.5x; total tokens 1.4x / 1.5x.

Every backend offers the explore arm's tool: the SDK agents themselves, both CLIs through the kit's
MCP server (``mcp__kit__explore``, the same implementation); with no ``*explore`` tool offered (an
arm whose ``tools`` were cleared) the policy reads files.

Grading: the final answer (turn 3) is what the run stage grades; the whole chain of three answers and
when there is no ground truth are :class:`kit.tasks.repo_pack.QuestionChain`'s rules.
"""

from __future__ import annotations

import random
import re
import string
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any

from kit.errors import InputError
from kit.experiment.design import Arm
from kit.jsontypes import PackFacts
from kit.provider.policy import Conversation, Reply, ToolCall
from kit.tasks import tooluse
from kit.tasks.base import Grade
from kit.tasks.repo_pack import QuestionChain

QUESTIONS = (
    "How does the relay framework route a request through its middleware chain? Name the function that runs "
    "the chain and the file it is in.",
    "Where is the 404 / no-route case handled in that same chain? Name the function that detects it and the "
    "handler that answers it.",
    "What would I change to add a per-route middleware that runs before the global ones? Name the functions to modify.",
)
EXPLORE_INSTRUCTION = (
    "To find your way around the code, use the explore tool: give it a symbol name or a few words and work "
    "from the line-numbered excerpts it returns, rather than opening whole files. Read a file only when an "
    "excerpt is not enough."
)
FILES_INSTRUCTION = (
    "To find your way around the code, search it with grep for the words that matter, then open the files "
    "with the most matches and read them in full, working from their contents. Open a further file only "
    "when what you read is not enough."
)
PRESETS = {"small": 4, "large": 24}  # filler functions per module

CHAIN_FILES = ("relay/context.py", "relay/engine.py", "relay/chain.py")
DISPATCH_FILES = ("relay/server.py", "relay/dispatch.py", "relay/handler.py")
NOT_FOUND_FILES = ("relay/errors.py", "relay/fallback.py", "relay/responses.py")
APP_FILES = ("relay/app.py", "relay/routing.py", "relay/application.py")
FILLER_FILES = (
    "relay/render.py", "relay/binding.py", "relay/headers.py", "relay/cookies.py", "relay/static.py",
    "relay/util.py", "relay/middleware/logging.py", "relay/middleware/recovery.py", "relay/middleware/cors.py",
    "relay/middleware/basic_auth.py", "relay/middleware/timing.py",
)  # fmt: skip
NAMES = {
    "run_chain": ("run_chain", "walk_chain", "invoke_chain", "call_chain"),
    "dispatch": ("dispatch", "handle_request", "serve_request", "route_request"),
    "not_found": ("not_found", "no_route", "missing_route", "unmatched"),
    "register": ("add_route", "register", "route", "handle"),
    "combine": ("combine_handlers", "build_chain", "merge_handlers", "compose"),
    "globals": ("middleware", "global_middleware", "global_handlers", "stack"),
    "lookup": ("lookup", "find", "match"),
}
VERBS = (
    "parse",
    "format",
    "encode",
    "decode",
    "check",
    "collect",
    "apply",
    "render",
    "merge",
    "strip",
    "store",
    "load",
)
NOUNS = ("header", "cookie", "body", "query", "form", "payload", "status", "path", "param", "value", "session", "etag")
DOC_TAILS = (
    "before the handler writes the response",
    "for every request in the middleware chain",
    "when a route handler asks for it",
    "so later handlers see the same value",
    "as the router expects it",
    "for the request context",
    "and keep the result on the context",
)
# What each turn needs, how each arm looks for it.
NEEDS = (("run_chain",), ("dispatch", "not_found"), ("register", "combine"))
GREPS = ("chain|middleware", "404|not.?found|no.?route", "route|middleware")
QUERIES = (
    ("middleware chain run each handler in order", "chain index handler aborted"),
    ("no route not found 404 dispatch", "status 404 not found handler"),
    ("register route handler chain global middleware", "global middleware route handlers chain"),
)
FOLLOW_UP = ("run_chain", "not_found", "combine")  # the symbol whose references a second explore call shows


@dataclass(frozen=True)
class Truth:
    """Names and files of the key functions of one generated fixture."""

    names: dict[str, str]
    paths: dict[str, str]


@dataclass(frozen=True)
class Fixture:
    files: dict[str, str]
    truth: Truth


def generate(seed: int = 0, preset: str = "small") -> Fixture:
    """The repository for (seed, preset), byte-for-byte deterministic."""
    if preset not in PRESETS:
        raise InputError(f"preset {preset!r}; accepted: {sorted(PRESETS)}")
    pick = random.Random(f"occupancy|{seed}")  # the truth depends on the seed only: presets differ in bulk
    n = {role: pick.choice(pool) for role, pool in NAMES.items()}
    paths = {
        "run_chain": pick.choice(CHAIN_FILES),
        "dispatch": pick.choice(DISPATCH_FILES),
        "not_found": pick.choice(NOT_FOUND_FILES),
        "register": pick.choice(APP_FILES),
    }
    rng = random.Random(f"occupancy|{seed}|{preset}")
    paths["combine"] = paths["register"]
    fill = PRESETS[preset]
    mod = {role: _module_name(path) for role, path in paths.items()}
    files = {
        "README.md": "# relay\n\nA small HTTP framework: routes, a middleware chain, and helpers for requests.\n",
        "relay/__init__.py": f'"""relay: a small HTTP framework."""\n\nfrom {mod["register"]} import App\n',
        "relay/request.py": _request_source(rng, fill),
        "relay/router.py": _router_source(n, rng, fill),
        paths["run_chain"]: _chain_source(n, rng, fill),
        paths["dispatch"]: _dispatch_source(n, mod, rng, fill),
        paths["not_found"]: _errors_source(n, rng, fill),
        paths["register"]: _app_source(n, rng, fill),
    }
    for path in FILLER_FILES:
        files[path] = _filler_module(path, rng, fill)
    return Fixture(dict(sorted(files.items())), Truth(n, paths))


def _module_name(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


def _filler(rng: random.Random, count: int, used: set[str]) -> list[str]:
    lines = []
    for _ in range(count):
        name = f"{rng.choice(VERBS)}_{rng.choice(NOUNS)}"
        while name in used:
            name = f"{name}_{rng.randint(2, 9)}"
        used.add(name)
        verb, noun = name.split("_")[:2]
        a, b = rng.randint(2, 97), rng.randint(2, 997)
        lines += [
            f"def {name}(ctx, value):",
            f'    """{verb.capitalize()} the {noun} {rng.choice(DOC_TAILS)}."""',
            f"    result = (len(str(value)) * {a} + {b}) % 997",
            f"    ctx.values[{noun!r}] = result",
            "    return result",
            "",
            "",
        ]
    return lines


# The fixture's key modules, as readable source with $role placeholders (kit/data/fixtures/occupancy/).
_TEMPLATES = files("kit") / "data" / "fixtures" / "occupancy"


def _source(stem: str, names: dict[str, str] | None = None) -> str:
    """A key module's head: its template with the seed's names put in."""
    return string.Template((_TEMPLATES / f"{stem}.py.tmpl").read_text()).substitute(names or {})


def _join(head: str, rng: random.Random, fill: int, used: set[str]) -> str:
    return "\n".join([head, *_filler(rng, fill, used)]).rstrip() + "\n"


def _request_source(rng: random.Random, fill: int) -> str:
    return _join(_source("request"), rng, fill, {"abort"})


def _router_source(n: dict[str, str], rng: random.Random, fill: int) -> str:
    return _join(_source("router", n), rng, fill, set())


def _chain_source(n: dict[str, str], rng: random.Random, fill: int) -> str:
    return _join(_source("chain", n), rng, fill, {n["run_chain"]})


def _dispatch_source(n: dict[str, str], mod: dict[str, str], rng: random.Random, fill: int) -> str:
    imports = [
        f"from {mod['run_chain']} import {n['run_chain']}",
        f"from {mod['not_found']} import {n['not_found']}",
        "from relay.request import Context",
    ]
    return _join(_source("dispatch", {**n, "imports": "\n".join(sorted(imports))}), rng, fill, {n["dispatch"]})


def _errors_source(n: dict[str, str], rng: random.Random, fill: int) -> str:
    return _join(_source("errors", n), rng, fill, {n["not_found"], "method_not_allowed", "server_error"})


def _app_source(n: dict[str, str], rng: random.Random, fill: int) -> str:
    return _join(_source("app", n), rng, fill, set())


def _filler_module(path: str, rng: random.Random, fill: int) -> str:
    stem = Path(path).stem
    head = [f'"""Helpers: {stem.replace("_", " ")}."""', "", ""]
    if "/middleware/" in path:
        head += [
            f"def {stem}_middleware(ctx):",
            f'    """The {stem.replace("_", " ")} middleware: runs for every request in the chain."""',
            f"    ctx.values[{stem!r}] = True",
            "",
            "",
        ]
    return _join("\n".join(head), rng, fill, set())


# ---------------------------------------------------------------- the answers, from what was read

_PATTERNS = {
    "run_chain": lambda b, f: "chain[index](ctx)" in b.text,
    "dispatch": lambda b, f: "if chain is None:" in b.text,
    "not_found": lambda b, f: "ctx.status = 404" in b.text,
    "combine": lambda b, f: re.search(r"return \[\*self\.\w+, handler\]", b.text) is not None,
    "register": lambda b, f: "combine" in f and f"self.{f['combine'][0]}(handler)" in b.text,
}


def facts_from(seen: dict[str, dict[int, str]]) -> dict[str, tuple[str, str]]:
    """Role -> (name, path) of every key function whose code is in view (``tooluse.seen_lines``); the innermost
    definition that shows the role's code wins (a method, not the class around it)."""
    found: dict[str, tuple[str, str]] = {}
    defs = tooluse.blocks(seen)
    for role in ("run_chain", "dispatch", "not_found", "combine", "register", "globals"):
        if role == "globals":
            matches = (re.search(r"\[\*self\.(\w+), handler\]", b.text) for b in defs if "combine" in found)
            match = next((m for m in matches if m), None)
            if match:
                found["globals"] = (match.group(1), found["combine"][1])
            continue
        block = min((b for b in defs if _PATTERNS[role](b, found)), key=lambda b: len(b.lines), default=None)
        if block:
            found[role] = (block.name, block.path)
    return found


def answer(turn: int, facts: dict[str, tuple[str, str]]) -> str:
    """The answer to question ``turn`` (0-based) from the facts in view; unknown parts said so."""

    def f(role: str) -> str:
        return f"`{facts[role][0]}()` in `{facts[role][1]}`" if role in facts else "(not found in what I read)"

    if turn == 0:
        lines = [f"The chain is run by {f('run_chain')}: it calls each handler of the chain in order, index by index,"]
        lines.append("and stops early when a handler aborts the request context.")
        if "dispatch" in facts:
            lines.append(f"{f('dispatch')} builds a request's chain and hands it over.")
        return " ".join(lines)
    if turn == 1:
        return (
            f"The no-route case is detected in {f('dispatch')}: when the router finds no handlers for the method "
            f"and path, the chain becomes the global middleware followed by {f('not_found')}, which answers with "
            'status 404 ("page not found"). It then runs through the same chain runner as every other request.'
        )
    g = f"self.{facts['globals'][0]}" if "globals" in facts else "the global middleware list"
    return (
        f"Change {f('register')} to accept the route's own middleware (e.g. `middleware=()`) and pass it on, and "
        f"change {f('combine')} to return `[*middleware, *{g}, handler]` so the per-route middleware run before "
        "the global ones; the chain runner needs no change, it calls the handlers in list order."
    )


def grade_turn(turn: int, text: str, truth: Truth) -> Grade:
    """The named functions (and files) question ``turn`` asks for, found in the answer ``text``."""
    n, p = truth.names, truth.paths
    wanted = {
        0: [("chain runner", n["run_chain"]), ("its file", p["run_chain"])],
        1: [("dispatcher", n["dispatch"]), ("not-found handler", n["not_found"]), ("status", "404")],
        2: [("registration", n["register"]), ("chain building", n["combine"]), ("global list", f"self.{n['globals']}")],
    }[turn]
    found = [label for label, token in wanted if re.search(rf"(?<![\w/.]){re.escape(token)}(?![\w/])", text)]
    missing = [label for label, _ in wanted if label not in found]
    detail = f"turn {turn + 1}: {len(found)}/{len(wanted)}" + (f" (missing {', '.join(missing)})" if missing else "")
    return Grade(round(len(found) / len(wanted), 4), detail)


def grade_turns(answers: list[str], truth: Truth) -> Grade:
    """Every turn's answer graded; the score is the mean over the three questions (a missing answer scores 0)."""
    grades = [grade_turn(t, answers[t] if t < len(answers) else "", truth) for t in range(len(QUESTIONS))]
    return Grade(round(sum(g.score or 0 for g in grades) / len(grades), 4), "; ".join(g.detail for g in grades))


# ---------------------------------------------------------------- the scripted agent


_Step = tuple[str, tuple[ToolCall, ...]]  # what an agent says it does, and the calls


@dataclass
class OccupancyPolicy:
    """The scripted coding agent for this pack (see the module docstring for its true effect)."""

    p_second_explore: float = 0.5
    p_extra_read: float = 0.35
    reads_first: int = 2
    questions: tuple[str, ...] = QUESTIONS
    name: str = "occupancy"

    def reply(self, conv: Conversation) -> Reply:
        if not (tooluse.can_read(conv) or tooluse.can_explore(conv)):
            return Reply(text="I have no tool to look at the code here, so I cannot answer from it.")
        turn = tooluse.current_question(conv, self.questions)
        # The scripted agent answers this pack's own questions; for others it is the generic one (None).
        scripted = turn if self.questions == QUESTIONS else None
        rng = conv.rng(f"occupancy|{turn}")
        reasoning = rng.randint(24, 120)
        seen = tooluse.seen_lines(conv)
        facts = facts_from(seen) if scripted is not None else {}
        done = scripted is not None and all(role in facts for role in NEEDS[scripted])
        if tooluse.can_explore(conv):
            reply = self._explore(conv, scripted, done, facts, rng)
        else:
            reply = self._files(conv, scripted, done, rng)
        if reply is not None:
            return Reply(reply[0], reply[1], reasoning)
        text = answer(scripted, facts) if scripted is not None else tooluse.definitions_answer(seen)
        return Reply(text, (), reasoning)

    def _explore(
        self, conv: Conversation, scripted: int | None, done: bool, facts: dict, rng: random.Random
    ) -> _Step | None:
        """The next explore call, or None when the answer's facts are in view (or every wording was tried)."""
        asked = [c.arguments.get("query") for c, _ in tooluse.results_this_turn(conv) if c.name.endswith("explore")]
        if scripted is not None and done:
            symbol = facts[FOLLOW_UP[scripted]][0] if FOLLOW_UP[scripted] in facts else None
            if len(asked) == 1 and symbol and rng.random() < self.p_second_explore:
                return f"Looking up where `{symbol}` is used.", (tooluse.explore_call(conv, symbol),)
            return None
        queries = QUERIES[scripted] if scripted is not None else (conv.last_user_text()[-300:],)
        pending = [q for q in queries if q not in asked]
        if not pending:
            return None
        return f"Exploring: {pending[0]}.", (tooluse.explore_call(conv, pending[0]),)

    def _files(self, conv: Conversation, scripted: int | None, done: bool, rng: random.Random) -> _Step | None:
        """The turn's search, then reads of its top hits, or None when the answer's facts are in view."""
        if done or not tooluse.can_read(conv):
            return None
        this_turn = tooluse.results_this_turn(conv)
        if not any(tooluse.is_search(c) for c, _ in this_turn) and tooluse.can_grep(conv):
            pattern = GREPS[scripted] if scripted is not None else tooluse.words_pattern(conv.last_user_text())
            return f"Searching for {pattern}.", (tooluse.grep_call(conv, pattern),)
        counts: dict[str, int] = {}
        for path, _, _ in tooluse.grep_hits(conv, this_turn):
            counts[path] = counts.get(path, 0) + 1
        read = tooluse.file_contents(conv)
        unread = [p for p in sorted(counts, key=lambda p: (-counts[p], p)) if p not in read]
        already = any(tooluse.requested_path(conv, c) for c, _ in this_turn)
        if not unread or (already and scripted is None):
            return None
        if already:  # the first reads did not show what the answer needs: one more file
            chosen = unread[:1]
        else:
            first, rest = unread[: self.reads_first], unread[self.reads_first :]
            chosen = first + [p for p in rest if rng.random() < self.p_extra_read]
        return f"Reading {', '.join(chosen)}.", tuple(tooluse.read_call(conv, p) for p in chosen)


# ---------------------------------------------------------------- the pack


@dataclass
class OccupancyPack(QuestionChain):
    """The pack object the run stage uses (see the module docstring); the final answer is turn 3."""

    QUESTIONS = QUESTIONS
    PRESETS = PRESETS
    generator = staticmethod(generate)
    grade_turn = staticmethod(grade_turn)
    grade_chain = staticmethod(grade_turns)

    seed: int = 0
    preset: str = "small"
    p_second_explore: float = 0.5
    p_extra_read: float = 0.35
    reads_first: int = 2
    repo: str | None = None
    globs: list[str] = field(default_factory=list)
    questions: str | None = None  # a `||`-separated chain replacing the three questions (as codegraph's harness)
    name: str = "occupancy"

    @property
    def true_effect(self) -> str:
        return (
            "explore answers each turn from 1 explore call (a second with p="
            f"{self.p_second_explore}); files greps, reads the {self.reads_first} top-hit files plus each other hit "
            f"file with p={self.p_extra_read}, then one more until the facts are in view; answers identical; "
            "resident tool output 9.2x (preset large) / 2.1x (small) smaller with explore"
        )

    def arms(self) -> dict[str, Arm]:
        return {
            "explore": Arm(
                "explore", EXPLORE_INSTRUCTION, placement="append_system", tools=("explore",),
                description="dense code-exploration tool (definitions + references, line-numbered)",
            ),
            "files": Arm(
                "files", FILES_INSTRUCTION, placement="append_system", description="read/grep/bash only",
            ),
        }  # fmt: skip

    def policy(self) -> OccupancyPolicy:
        return OccupancyPolicy(self.p_second_explore, self.p_extra_read, self.reads_first, tuple(self.prompts()))

    def describe(self) -> PackFacts:
        out: dict[str, Any] = {
            "task": self.name,
            "seed": self.seed,
            "preset": self.preset,
            "p_second_explore": self.p_second_explore,
            "p_extra_read": self.p_extra_read,
            "reads_first": self.reads_first,
            "turns": len(self.prompts()),
            "true_effect": self.true_effect,
        }
        return self.describe_repo(out)
