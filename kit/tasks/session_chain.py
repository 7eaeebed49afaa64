"""Task pack ``session-chain`` (PromptPilot's chain_auth): five chained turns on a repository with a seeded bug.

The fixture is a small synthetic Python web service whose auth package has an off-by-one in token
expiry: the check uses a strict comparison, so a token is still accepted at exactly its expiry second.
Module and function names, the form of the faulty comparison and the token lifetime vary with the
seed. The turns build on each other: T1 where authentication happens, T2 the expiry check (file,
function, line), T3 explain the bug, T4 propose the fix as a diff, T5 write the test plan.

Arms (as in that write-up, docs/method.md#sources): ``builtin`` resumes one session across the turns
(native resume: the whole transcript, every file read included, is carried and re-sent);
``with_session`` starts every turn as a fresh session given a compact summary of the earlier questions
and answers (``kit.agents.sdk``).

True effect of the scripted policy (the analysis must recover it): each turn needs certain files in
view (T1 the session module, found by searching for ``auth|Auth`` and reading every non-test hit: the
package, its middleware and the API modules that use it; T2-T4 the tokens module, named by the session
module's import; T5 also the config and the existing token tests). A file already in the conversation is not read
again, so ``builtin`` reads each file once (and re-reads the tokens module with probability
``p_reread``, default 0.1, per later turn); ``with_session`` re-reads what each turn needs, going
straight to the files its summary names, or searching from scratch with probability ``p_rediscover``
(default 0.2). Answers are computed from what was read and are equally correct in both arms.
So ``with_session`` makes more tool calls and reads more, but sends fewer total tokens because no
transcript is carried. Measured on the embedded provider (10 trials per arm, four salts, sdk-openai /
sdk-anthropic): total tokens builtin / with_session 1.57-1.91x / 1.55-1.89x with preset large and
1.20-1.39x / 1.14-1.31x with preset small; with_session makes 1.6-1.9x the file reads (16.5-19.3 vs
10.1-10.4 per trial; the spread is mostly how many of its 40 later turns drew a rediscovery).
The uncached ratio is not a property of the pack: it slides with cache warmth (docs/method.md#warmth). Cold,
it equals the total ratio; at the embedded provider's warmth (cache hit rate builtin 84%, with_session
35%, preset large) builtin / with_session uncached is ~0.54x, inverted, because builtin's long
transcript is mostly cache reads. Report total and uncached separately, never as one range.

Grading: the final answer (T5, the test plan) is what the run stage grades; the whole chain of five answers and
when there is no ground truth are :class:`kit.tasks.repo_pack.QuestionChain`'s rules.
"""

from __future__ import annotations

import hashlib
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
    "Where does authentication happen in this project? Name the file and the function that authenticates an "
    "incoming request.",
    "Find the check that decides whether a token has expired: which file, function and line?",
    "There is a bug in that expiry check. Explain it: what goes wrong, and at which boundary?",
    "Propose the fix as a minimal unified diff.",
    "Write the test plan for the fix: which cases, with which concrete timestamps, in which test file?",
)
PRESETS = {"small": 4, "large": 30}  # filler functions per module
NAMES = {
    "middleware": ("middleware", "guards", "decorators"),
    "session": ("session", "login", "identity"),
    "tokens": ("tokens", "jwt", "credentials"),
    "authenticate": ("authenticate", "authenticate_request", "resolve_user", "current_user"),
    "decode": ("decode_token", "parse_token", "read_claims"),
    "is_expired": ("is_expired", "token_expired", "has_expired", "expired"),
}
# The faulty comparison and its fix: strict where it must be inclusive (accepted at exactly exp).
BUGS = (
    ('now > claims["exp"]', 'now >= claims["exp"]'),
    ('claims["exp"] < now', 'claims["exp"] <= now'),
    ('now - claims["exp"] > 0', 'now - claims["exp"] >= 0'),
)
TTLS = (300, 900, 1800, 3600)
TEST_NOW = 1_700_000_000
API_FILES = ("app/api/addresses.py", "app/api/invoices.py", "app/api/orders.py")
FILLER_FILES = ("app/storage/db.py", "app/storage/cache.py", "app/util/text.py", "app/util/timefmt.py")
VERBS = ("load", "save", "format", "parse", "check", "merge", "list", "count", "find", "update")
NOUNS = ("user", "order", "item", "address", "invoice", "note", "profile", "setting", "record", "page")
NEEDS = (("session",), ("tokens",), ("tokens",), ("tokens",), ("tokens", "config", "tests"))
DISCOVER = "auth|Auth"  # what the agent searches for to find where authentication happens
# How each CLI asks the model to summarise its context when it compacts (seen by the embedded provider: Claude
# Code 2.1.328's ``/compact`` request, Codex 0.169.0's automatic one past ``model_auto_compact_token_limit``)
COMPACTION_PROMPTS = (
    "Your task is to create a detailed summary of the conversation so far",
    "CONTEXT CHECKPOINT COMPACTION",
)


@dataclass(frozen=True)
class Truth:
    names: dict[str, str]
    paths: dict[str, str]  # session, middleware, tokens, config, tests
    buggy: str
    fixed: str
    line: int  # the line of the faulty comparison
    ttl: int


@dataclass(frozen=True)
class Fixture:
    files: dict[str, str]
    truth: Truth


def generate(seed: int = 0, preset: str = "small") -> Fixture:
    """The repository for (seed, preset), byte-for-byte deterministic."""
    if preset not in PRESETS:
        raise InputError(f"preset {preset!r}; accepted: {sorted(PRESETS)}")
    pick = random.Random(f"session-chain|{seed}")  # the truth depends on the seed only: presets differ in bulk
    n = {role: pick.choice(pool) for role, pool in NAMES.items()}
    buggy, fixed = pick.choice(BUGS)
    ttl = pick.choice(TTLS)
    rng = random.Random(f"session-chain|{seed}|{preset}")
    fill = PRESETS[preset]
    paths = {
        "middleware": f"app/auth/{n['middleware']}.py",
        "session": f"app/auth/{n['session']}.py",
        "tokens": f"app/auth/{n['tokens']}.py",
        "config": "app/config.py",
        "tests": f"tests/test_{n['tokens']}.py",
    }
    tokens, line = _tokens_source(n, buggy, rng, fill)
    files = {
        "README.md": "# shop\n\nA small web service: users, orders and token-based authentication.\n",
        "app/__init__.py": '"""shop: a small web service."""\n',
        "app/auth/__init__.py": '"""Authentication: tokens, sessions and handler guards."""\n',
        "app/api/__init__.py": '"""HTTP handlers."""\n',
        "app/storage/__init__.py": '"""Persistence."""\n',
        "app/util/__init__.py": '"""Small helpers."""\n',
        paths["config"]: _config_source(ttl, rng),
        paths["tokens"]: tokens,
        paths["session"]: _session_source(n, rng, fill),
        paths["middleware"]: _middleware_source(n, rng, fill),
        paths["tests"]: _tests_source(n),
        "tests/test_routes.py": _route_tests_source(),
    }
    for path in API_FILES:
        files[path] = _api_module(path, n, rng, fill)
    for path in FILLER_FILES:
        files[path] = _filler_module(path, rng, fill)
    return Fixture(dict(sorted(files.items())), Truth(n, paths, buggy, fixed, line, ttl))


def _filler(rng: random.Random, count: int) -> list[str]:
    lines, used = [], set()
    for _ in range(count):
        name = f"{rng.choice(VERBS)}_{rng.choice(NOUNS)}"
        while name in used:
            name = f"{name}_{rng.randint(2, 9)}"
        used.add(name)
        verb, noun = name.split("_")[:2]
        lines += [
            f"def {name}(db, key, limit={rng.randint(5, 500)}):",
            f'    """{verb.capitalize()} the {noun} stored under key (at most limit rows)."""',
            f"    rows = db.query({noun + 's'!r}, key=key)",
            f"    return [row for row in rows if row.get({noun!r})][:limit]",
            "",
            "",
        ]
    return lines


# The fixture's key modules, as readable source with $name placeholders (kit/data/fixtures/session_chain/).
_TEMPLATES = files("kit") / "data" / "fixtures" / "session_chain"


def _source(stem: str, names: dict[str, str]) -> str:
    """A key module's head: its template with the seed's names put in."""
    return string.Template((_TEMPLATES / f"{stem}.py.tmpl").read_text()).substitute(names)


def _join(head: str, rng: random.Random, fill: int) -> str:
    return "\n".join([head, *_filler(rng, fill)]).rstrip() + "\n"


def _config_source(ttl: int, rng: random.Random) -> str:
    return (
        "\n".join(
            [
                '"""Application settings."""',
                "",
                f"TOKEN_TTL_S = {ttl}",
                f'SECRET_KEY = "dev-{rng.getrandbits(64):016x}"',
                'DATABASE_URL = "sqlite:///shop.db"',
                f"PAGE_SIZE = {rng.choice((20, 50, 100))}",
                f"CACHE_SECONDS = {rng.choice((30, 60, 120))}",
            ]
        )
        + "\n"
    )


def _tokens_source(n: dict[str, str], buggy: str, rng: random.Random, fill: int) -> tuple[str, int]:
    head = _source("tokens", {**n, "buggy": buggy})
    line = head.split("\n").index(f"    return {buggy}") + 1
    return _join(head, rng, fill), line


def _session_source(n: dict[str, str], rng: random.Random, fill: int) -> str:
    return _join(_source("session", n), rng, fill)


def _middleware_source(n: dict[str, str], rng: random.Random, fill: int) -> str:
    return _join(_source("middleware", n), rng, fill)


def _tests_source(n: dict[str, str]) -> str:
    return _source("tests", {**n, "now": f"{TEST_NOW:_}"}) + "\n"


def _route_tests_source() -> str:
    return (
        "\n".join(
            [
                '"""Tests of the HTTP handlers."""',
                "",
                "",
                "def test_orders_need_a_token(client):",
                '    assert client.get("/orders").status == 401',
                "",
                "",
                "def test_orders_with_a_token(client, token):",
                '    assert client.get("/orders", headers={"Authorization": f"Bearer {token}"}).status == 200',
            ]
        )
        + "\n"
    )


def _api_module(path: str, n: dict[str, str], rng: random.Random, fill: int) -> str:
    noun = Path(path).stem
    names = {**n, "noun": noun, "noun_repr": repr(noun), "Noun": noun.capitalize()}
    return _join(_source("api", names), rng, fill)


def _filler_module(path: str, rng: random.Random, fill: int) -> str:
    stem = Path(path).stem
    return _join(f'"""{stem.capitalize()} helpers."""\n\n', rng, fill)


# ---------------------------------------------------------------- the answers, from what was read

_IMPORT = re.compile(r"^from ([\w.]+) import (.+)$")
_MENTION = re.compile(r"expiry check is `(\w+)\(\)` in `([\w/.-]+\.py)`")
_AUTH_MENTION = re.compile(r"[Aa]uthentication happens in `(\w+)\(\)` in `([\w/.-]+\.py)`")
_STRICT = re.compile(r"\s(<|>)\s")


@dataclass
class Facts:
    """What the agent knows from the code in view and from the text of the conversation."""

    paths: dict[str, str] = field(default_factory=dict)  # role -> path (known, not necessarily read)
    names: dict[str, str] = field(default_factory=dict)
    check: tuple[int, str] | None = None  # (line, expression) of the expiry comparison
    ttl: int | None = None
    test_now: int | None = None


def facts_from(seen: dict[str, dict[int, str]], text: str) -> Facts:
    """Facts from the seen source (``tooluse.seen_lines``) and the prose (earlier answers, a summary)."""
    f = Facts()
    if m := _AUTH_MENTION.search(text):
        f.names["authenticate"], f.paths["session"] = m.groups()
    if m := _MENTION.search(text):
        f.names["is_expired"], f.paths["tokens"] = m.groups()
    for block in tooluse.blocks(seen):
        if 'headers.get("Authorization"' in block.text:
            f.names["authenticate"], f.paths["session"] = block.name, block.path
            if m := re.search(r"if (\w+)\(claims, now\)", block.text):
                f.names["is_expired"] = m.group(1)
            if m := re.search(r"claims = (\w+)\(token\)", block.text):
                f.names["decode"] = m.group(1)
    if "session" in f.paths and "is_expired" in f.names:
        for line in seen.get(f.paths["session"], {}).values():
            m = _IMPORT.match(line)
            if m and f.names["is_expired"] in re.split(r",\s*", m.group(2)):
                f.paths["tokens"] = m.group(1).replace(".", "/") + ".py"
    tokens = seen.get(f.paths.get("tokens", ""), {})
    for block in tooluse.blocks({f.paths["tokens"]: tokens} if tokens else {}):
        if block.name == f.names.get("is_expired"):
            f.check = next(((n, t.strip()[7:]) for n, t in block.lines if t.strip().startswith("return ")), None)
    for line in tokens.values():
        m = _IMPORT.match(line)
        if m and "TOKEN_TTL_S" in m.group(2):
            f.paths["config"] = m.group(1).replace(".", "/") + ".py"
    if "tokens" in f.paths:
        f.paths["tests"] = f"tests/test_{Path(f.paths['tokens']).name}"
    for line in seen.get(f.paths.get("config", ""), {}).values():
        if m := re.match(r"TOKEN_TTL_S = (\d+)", line):
            f.ttl = int(m.group(1))
    for line in seen.get(f.paths.get("tests", ""), {}).values():
        if m := re.match(r"NOW = ([\d_]+)", line):
            f.test_now = int(m.group(1).replace("_", ""))
    return f


def fix_of(expression: str) -> str | None:
    """The inclusive form of a strict comparison (the off-by-one's fix), or None if it is not strict."""
    return _STRICT.sub(lambda m: f" {m.group(1)}= ", expression, count=1) if _STRICT.search(expression) else None


def answer(turn: int, f: Facts) -> str:
    """The answer to question ``turn`` (0-based) from the facts; what is not known is said so."""
    unknown = "(not found in what I read)"
    exp_fn, tok = f.names.get("is_expired", "is_expired"), f.paths.get("tokens", unknown)
    check = f"The expiry check is `{exp_fn}()` in `{tok}`"
    if turn == 0:
        if "session" not in f.paths:
            return f"I could not find where authentication happens {unknown}."
        return (
            f"Authentication happens in `{f.names['authenticate']}()` in `{f.paths['session']}`: it takes the bearer "
            f"token from the Authorization header, decodes it with `{f.names.get('decode', '?')}()` and rejects it "
            f"when it has expired. {check}."
        )
    if f.check is None:
        return f"{check}, but I could not read the comparison {unknown}."
    line, expr = f.check
    fixed = fix_of(expr)
    if turn == 1:
        return f"{check}, line {line}: `return {expr}`."
    if fixed is None:
        return f"{check}, line {line}: `return {expr}`. I see no off-by-one in it."
    if turn == 2:
        return (
            f"{check}, line {line}: `return {expr}` uses a strict comparison, so it is off by one at the boundary. "
            "When `now` equals `claims['exp']` exactly the check says not expired and the token is still accepted "
            "at its expiry second (a lifetime of TTL + 1 seconds); a token must count as expired from `exp` on."
        )
    if turn == 3:
        return "\n".join(
            [
                f"{check}, line {line}. Make the comparison inclusive:",
                "",
                "```diff",
                f"--- a/{tok}",
                f"+++ b/{tok}",
                f"@@ -{line} +{line} @@",
                f"-    return {expr}",
                f"+    return {fixed}",
                "```",
            ]
        )
    if f.ttl is None or f.test_now is None:
        return f"{check}. I could not read the token lifetime or the test clock {unknown}."
    exp = f.test_now + f.ttl
    return "\n".join(
        [
            f"{check}, line {line}. Test plan, in `{f.paths['tests']}`: issue a token at NOW = {f.test_now} with "
            f"TOKEN_TTL_S = {f.ttl}, so exp = {exp}, and call `{exp_fn}(claims, now)`:",
            f"1. now = {exp - 1} (one second before exp): not expired.",
            f"2. now = {exp} (exactly exp): expired. This case fails before the fix.",
            f"3. now = {exp + 1} (one second after exp): expired.",
            f"4. End to end: `{f.names.get('authenticate', 'authenticate')}()` rejects that token at now = {exp} "
            "with AuthError('token expired').",
        ]
    )


def grade_turn(turn: int, text: str, truth: Truth) -> Grade:
    """The facts question ``turn`` asks for, found in the answer ``text``."""
    n, p = truth.names, truth.paths
    exp = TEST_NOW + truth.ttl
    plain = re.sub(r"(?<=\d)[_,](?=\d)", "", text)
    ws = " ".join(text.split())

    def has(token: str) -> bool:
        return re.search(rf"(?<![\w/.]){re.escape(token)}(?![\w/])", plain) is not None

    def diff_line(sign: str, expr: str) -> bool:
        return re.search(rf"^\{sign}\s*return\s+{re.escape(expr)}\s*$", text, re.MULTILINE) is not None

    wanted = {
        0: [("session file", has(p["session"])), ("authenticate function", has(n["authenticate"]))],
        1: [
            ("tokens file", has(p["tokens"])),
            ("expiry function", has(n["is_expired"])),
            ("line", re.search(rf"\bline\s*{truth.line}\b|:{truth.line}\b", text) is not None),
        ],
        2: [
            ("expiry function", has(n["is_expired"])),
            ("faulty comparison", truth.buggy in ws),
            ("boundary", re.search(r"exactly|boundary|equals?\b|==|off.by.one", text, re.IGNORECASE) is not None),
        ],
        3: [
            (
                "file in diff",
                re.search(rf"^(?:---|\+\+\+) (?:[ab]/)?{re.escape(p['tokens'])}\s*$", text, re.M) is not None,
            ),
            ("removed line", diff_line("-", truth.buggy)),
            ("added line", diff_line("+", truth.fixed)),
        ],
        4: [
            ("test file", has(p["tests"])),
            ("expiry function", has(n["is_expired"])),
            ("exp - 1", has(str(exp - 1))),
            ("exp", has(str(exp))),
            ("exp + 1", has(str(exp + 1))),
        ],
    }[turn]
    missing = [label for label, ok in wanted if not ok]
    score = (len(wanted) - len(missing)) / len(wanted)
    detail = f"turn {turn + 1}: {len(wanted) - len(missing)}/{len(wanted)}"
    return Grade(round(score, 4), detail + (f" (missing {', '.join(missing)})" if missing else ""))


def grade_turns(answers: list[str], truth: Truth) -> Grade:
    """Every turn's answer graded; the score is the mean over the five turns (a missing answer scores 0)."""
    grades = [grade_turn(t, answers[t] if t < len(answers) else "", truth) for t in range(len(QUESTIONS))]
    return Grade(round(sum(g.score or 0 for g in grades) / len(grades), 4), "; ".join(g.detail for g in grades))


# ---------------------------------------------------------------- the scripted agent


def _turn_rng(conv: Conversation, turn: int, salt: str) -> random.Random:
    """Randomness fixed for a whole turn (``Conversation.rng`` changes with every cycle)."""
    key = f"{conv.seed}|{conv.identity()}|{turn}|{salt}"
    return random.Random(int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big"))


@dataclass
class SessionChainPolicy:
    """The scripted coding agent for this pack (see the module docstring for its true effect)."""

    p_reread: float = 0.1
    p_rediscover: float = 0.2
    questions: tuple[str, ...] = QUESTIONS
    name: str = "session-chain"

    def reply(self, conv: Conversation) -> Reply:
        if is_compaction(conv):
            return Reply(compaction_summary(conv), (), conv.rng("session-chain").randint(32, 160))
        if not tooluse.can_read(conv):
            return Reply(text="I have no tool to read files here, so I cannot inspect the project.")
        turn = tooluse.current_question(conv, self.questions)
        reasoning = conv.rng("session-chain").randint(32, 160)
        seen = tooluse.seen_lines(conv)
        if self.questions != QUESTIONS or turn is None:
            return self._generic(conv, seen, reasoning)
        this_turn = tooluse.results_this_turn(conv)
        first_cycle = not this_turn
        # A fresh session (no earlier answer in this conversation) may distrust its summary's file paths.
        fresh = turn > 0 and not any(m.role == "assistant" and m.text and not m.tool_calls for m in conv.messages)
        rediscover = fresh and _turn_rng(conv, turn, "rediscover").random() < self.p_rediscover
        prose = "" if rediscover else "\n".join(m.text for m in conv.messages if m.role in ("user", "assistant"))
        f = facts_from(seen, prose)
        read = tooluse.file_contents(conv)
        resumed_later = first_cycle and not fresh and turn > 0 and f.paths.get("tokens") in read
        if resumed_later and _turn_rng(conv, turn, "reread").random() < self.p_reread:
            return Reply("Opening the token module again.", (tooluse.read_call(conv, f.paths["tokens"]),), reasoning)
        calls = self._next_calls(conv, turn, f, read, this_turn)
        if calls:
            paths = [tooluse.requested_path(conv, c) for c in calls]
            text = f"Reading {', '.join(p for p in paths if p)}." if all(paths) else f"Searching for {DISCOVER}."
            return Reply(text, calls, reasoning)
        return Reply(answer(turn, f), (), reasoning)

    def _next_calls(
        self, conv: Conversation, turn: int, f: Facts, read: dict[str, str], this_turn: list
    ) -> tuple[ToolCall, ...]:
        """The reads (or the search) that bring what this turn needs into view."""
        missing = [role for role in NEEDS[turn] if f.paths.get(role) not in read]
        known = [f.paths[role] for role in missing if role in f.paths]
        if known:
            return tuple(tooluse.read_call(conv, p) for p in dict.fromkeys(known))
        if not missing:
            return ()
        # The needed file is not known yet: find where authentication happens, then follow the imports.
        if "session" not in f.paths or f.paths["session"] not in read:
            if any(tooluse.is_search(c) for c, _ in this_turn):
                hits = [p for p, _, _ in tooluse.grep_hits(conv, this_turn) if not p.startswith("tests/")]
                unread = [p for p in dict.fromkeys(hits) if p not in read]
                return tuple(tooluse.read_call(conv, p) for p in unread)
            if tooluse.can_grep(conv):
                return (tooluse.grep_call(conv, DISCOVER),)
        return ()

    def _generic(self, conv: Conversation, seen: dict[str, dict[int, str]], reasoning: int) -> Reply:
        """A question without a script (a user's own chain): search its words, read the top files, summarise."""
        this_turn = tooluse.results_this_turn(conv)
        if not this_turn and tooluse.can_grep(conv):
            pattern = tooluse.words_pattern(conv.last_user_text())
            return Reply(f"Searching for {pattern}.", (tooluse.grep_call(conv, pattern),), reasoning)
        if not any(tooluse.requested_path(conv, c) for c, _ in this_turn):
            counts: dict[str, int] = {}
            for path, _, _ in tooluse.grep_hits(conv, this_turn):
                counts[path] = counts.get(path, 0) + 1
            top = sorted(counts, key=lambda p: (-counts[p], p))[:2]
            if top:
                return Reply("Reading the top matches.", tuple(tooluse.read_call(conv, p) for p in top), reasoning)
        return Reply(tooluse.definitions_answer(seen), (), reasoning)


def is_compaction(conv: Conversation) -> bool:
    """A CLI's request to summarise the conversation for a compaction (``COMPACTION_PROMPTS``), not a turn's."""
    return _asks_summary(conv.last_user_text())


def _asks_summary(text: str) -> bool:
    return any(marker in text for marker in COMPACTION_PROMPTS)


def compaction_summary(conv: Conversation) -> str:
    """The summary a compaction request gets: text only, as both CLIs ask (Claude Code retries a reply with a tool
    call: measured, two summary requests instead of one), naming the earlier questions, final answers and files
    read, in Claude Code's ``<analysis>``/``<summary>`` form (Codex keeps the text as it is)."""
    questions = [m.text for m in conv.messages if m.role == "user" and m.text and not _asks_summary(m.text)]
    answers = [m.text for m in conv.messages if m.role == "assistant" and m.text and not m.tool_calls]
    read = sorted(tooluse.file_contents(conv))
    lines = [f"- Question: {' '.join(q.split())[:300]}" for q in questions]
    lines += [f"- Answer: {' '.join(a.split())[:600]}" for a in answers]
    lines.append(f"- Files read: {', '.join(read) if read else 'none'}")
    return "<analysis>The conversation so far, in order.</analysis>\n<summary>\n" + "\n".join(lines) + "\n</summary>"


# ---------------------------------------------------------------- the pack


@dataclass
class SessionChainPack(QuestionChain):
    """The pack object the run stage uses (see the module docstring); the final answer is T5, the test plan."""

    QUESTIONS = QUESTIONS
    PRESETS = PRESETS
    generator = staticmethod(generate)
    grade_turn = staticmethod(grade_turn)
    grade_chain = staticmethod(grade_turns)

    seed: int = 0
    preset: str = "small"
    p_reread: float = 0.1
    p_rediscover: float = 0.2
    repo: str | None = None
    globs: list[str] = field(default_factory=list)
    questions: str | None = None  # a `||`-separated chain replacing T1-T5
    name: str = "session-chain"

    @property
    def true_effect(self) -> str:
        return (
            "builtin carries the transcript and reads each file once (re-reads the token module with "
            f"p={self.p_reread} per later turn); with_session re-reads what each turn needs (searching from "
            f"scratch with p={self.p_rediscover}); answers identical; total tokens builtin/with_session ~1.7x "
            "(preset large), ~1.3x (small)"
        )

    def arms(self) -> dict[str, Arm]:
        return {
            "builtin": Arm("builtin", session="resume", description="native resume: the whole transcript is carried"),
            "with_session": Arm(
                "with_session", session="fresh", description="each turn a fresh session with a compact summary"
            ),
        }

    def policy(self) -> SessionChainPolicy:
        return SessionChainPolicy(self.p_reread, self.p_rediscover, tuple(self.prompts()))

    def describe(self) -> PackFacts:
        out: dict[str, Any] = {
            "task": self.name,
            "seed": self.seed,
            "preset": self.preset,
            "p_reread": self.p_reread,
            "p_rediscover": self.p_rediscover,
            "turns": len(self.prompts()),
            "true_effect": self.true_effect,
        }
        return self.describe_repo(out)
