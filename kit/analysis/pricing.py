"""Price canonical token counts with dated rate cards (``kit/data/rates/*.yaml``).

Prices are data, not constants: they change within months, so each card row carries its source and
the date it was read. Canonical rows already resolve the provider conventions (``input_tokens`` holds
every prompt token; reads and writes are parts of it), so one formula serves OpenAI and Anthropic:

    fresh = input - cache_read - cache_write
    price = fresh x input + cache_read x cached_input + 5-minute writes x write_5m
            + 1-hour writes x write_1h + output x output

A card row without a write surcharge (``cache_write: null``: OpenAI before GPT-5.6, the Codex credit
card) bills writes as ordinary input. A model no card knows (every simulated ``sim-...`` model) prices
as NA with a warning naming it: a cost of zero would be a number users quote.

The cache-read rate is per model (0.1x input on most, 0.05x or 0.025x on some): a row may state it as
``read_x``, the multiplier its source gives, and its ``cached_input`` must then be ``input x read_x`` (or
is left out and computed), so a typed rate that disagrees with the documented rule fails at load. Prices
change on dates, announced ahead: a row with ``from`` (a UTC day) is in force from that day, until a
later row of the model, and each request is priced at the row in force on the day it started
(``started_at``). An announced change that was then withdrawn stays in the card, with the entry that
withdraws it (``cancels``: the day of the row it cancels, with its own source and date), so the card
keeps what was announced and what was retracted, and no request is priced at the cancelled row.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Literal

import numpy as np
import pandas as pd
import yaml

from kit.errors import InputError

Card = Literal["usd", "credits"]

CARD_FILES: dict[str, tuple[str, ...]] = {
    "usd": ("openai.yaml", "anthropic.yaml"),
    "credits": ("codex-credits.yaml",),
}
OUTPUT_NAMES = {"usd": "cost_usd", "credits": "credits"}
RATE_COLUMNS = ["input", "cached_input", "cache_write", "write_5m", "write_1h", "output"]
CARD_COLUMNS = [
    *("provider", "model", "from", "prefixes"),
    *RATE_COLUMNS,
    *("read_x", "unit", "source_url", "checked", "note"),
]
REQUIRED_ROW_KEYS = ("model", "input", "cached_input", "output", "unit", "source_url", "checked")
CANCEL_KEYS = ("model", "cancels", "source_url", "checked")
PER_MILLION = 1_000_000


def _day(value: object, where: str) -> str | None:
    """A card's ``from`` or ``cancels`` day as ``YYYY-MM-DD`` (None: no day); anything else fails at its place."""
    if value is None:
        return None
    day = str(value)
    if pd.isna(pd.to_datetime(day, format="%Y-%m-%d", errors="coerce")):
        raise InputError(f"{where}: {day!r} is not a day (YYYY-MM-DD)")
    return day


def _read_rate(row: dict, where: str) -> None:
    """Fill or check ``cached_input`` against the row's documented read multiplier ``read_x``."""
    if row.get("read_x") is None:
        return
    rule = float(row["input"]) * float(row["read_x"])
    if row.get("cached_input") is None:
        row["cached_input"] = rule
    elif abs(float(row["cached_input"]) - rule) > 1e-9 * max(1.0, rule):
        raise InputError(
            f"{where}: cached_input {row['cached_input']} is not input {row['input']} x read_x {row['read_x']}"
        )


def _load_file(name: str) -> list[dict]:
    """Rows of one YAML card with the file's ``defaults`` merged in, less the rows a ``cancels`` entry
    withdraws; malformed rows, and a cancellation that names no row, fail with their place."""
    path = resources.files("kit") / "data" / "rates" / name
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    defaults = doc.get("defaults", {})
    rows: list[dict] = []
    cancels: list[tuple[str, str | None, str]] = []
    for i, raw in enumerate(doc["rows"]):
        row = {**defaults, **raw}
        where = f"{path}: rows[{i}] ({row.get('model', '?')})"
        if "cancels" in raw:
            missing = [k for k in CANCEL_KEYS if row.get(k) is None]
            if missing:
                raise InputError(f"{where}: missing {', '.join(missing)}")
            cancels.append((row["model"], _day(row["cancels"], where), where))
            continue
        row["from"] = _day(row.get("from"), where)
        _read_rate(row, where)
        missing = [k for k in REQUIRED_ROW_KEYS if row.get(k) is None]
        if missing:
            raise InputError(f"{where}: missing {', '.join(missing)}")
        if row["provider"] == "anthropic" and (row.get("write_5m") is None or row.get("write_1h") is None):
            raise InputError(f"{where}: an Anthropic row needs write_5m and write_1h")
        if any((r["model"], r["from"]) == (row["model"], row["from"]) for r in rows):
            raise InputError(f"{where}: a second row of {row['model']} from {row['from'] or 'the start'}")
        rows.append(row)
    for model, day, where in cancels:
        if not any((r["model"], r["from"]) == (model, day) for r in rows):
            raise InputError(f"{where}: cancels {model} from {day}, which no row of {path} holds")
    withdrawn = {(model, day) for model, day, _ in cancels}
    return [r for r in rows if (r["model"], r["from"]) not in withdrawn]


@cache
def _card_rows(card: str) -> tuple[dict, ...]:
    if card not in CARD_FILES:
        raise InputError(f"unknown rate card {card!r}: expected one of {sorted(CARD_FILES)}")
    return tuple(row for name in CARD_FILES[card] for row in _load_file(name))


def rate_card(card: Card = "usd") -> pd.DataFrame:
    """The rate card as a table to display next to priced results: one row per model and day it is in force
    from (``from``; empty: since the card begins), cancelled rows left out."""
    rows = [
        {k: (", ".join(r.get(k, [])) if k == "prefixes" else r.get(k)) for k in CARD_COLUMNS} for r in _card_rows(card)
    ]
    frame = pd.DataFrame(rows, columns=CARD_COLUMNS)
    return frame.astype({c: "Float64" for c in [*RATE_COLUMNS, "read_x"]})


def _match_model(model: str, card: Card = "usd") -> list[dict]:
    """The card rows of ``model`` in the order they came into force (an undated row first): an exact name
    first, else the longest listed prefix; empty if unknown."""
    rows = _card_rows(card)
    name = next((row["model"] for row in rows if row["model"] == model), None)
    if name is None:
        hits = [(len(p), row["model"]) for row in rows for p in row.get("prefixes", []) if model.startswith(p)]
        name = max(hits)[1] if hits else None
    return sorted((row for row in rows if row["model"] == name), key=lambda r: r["from"] or "")


def _in_force(rows: list[dict], started: pd.Series) -> tuple[np.ndarray, int]:
    """Which of a model's rows (``_match_model``) each request is priced at: the last one in force on its UTC
    day; a request of unknown day at the newest, counted for the warning where the model's price changed."""
    days = pd.to_datetime(started, utc=True, errors="coerce", format="ISO8601").dt.strftime("%Y-%m-%d")
    starts = np.array([row["from"] or "" for row in rows], dtype=object)
    known = days.notna().to_numpy()
    pick = np.full(len(days), len(rows) - 1)
    pick[known] = np.searchsorted(starts, days[known].to_numpy(dtype=object), side="right") - 1
    return np.maximum(pick, 0), int((~known).sum()) if len(rows) > 1 else 0


def _effective_rates(row: dict) -> dict[str, float]:
    """Per-token-kind USD/credits per 1M, with writes falling back to the input rate when not surcharged."""
    input_rate = float(row["input"])
    if row["provider"] == "anthropic":
        write_5m, write_1h = float(row["write_5m"]), float(row["write_1h"])
    else:
        write = input_rate if row.get("cache_write") is None else float(row["cache_write"])
        write_5m = write_1h = write
    return {
        "input": input_rate,
        "cached_input": float(row["cached_input"]),
        "write_5m": write_5m,
        "write_1h": write_1h,
        "output": float(row["output"]),
    }


def _column(frame: pd.DataFrame, name: str) -> pd.Series:
    if name not in frame.columns:
        raise InputError(f"price(): the table has no {name!r} column (expected canonical request or trial columns)")
    return frame[name].astype("Float64")


def price(frame: pd.DataFrame, card: Card = "usd") -> pd.Series:
    """Cost of each row (a request, or a trial's sums) in USD or Codex credits; NA where unknowable.

    NA when the model has no card row (with a warning naming it), when usage is unknown, or when a
    token kind that carries its own rate is missing. Each row is priced at its model's card row in force on
    the UTC day of its ``started_at`` (module docstring); without one, at the newest (with a warning where
    the model's price changed on a date). Unknown 1-hour splits price as 5-minute writes
    (the API default TTL) with a warning. The per-request long-context surcharge (OpenAI, > 272K input)
    is applied to request rows; trial rows are sums, so use :func:`price_by_trial` for those when any
    request may be that long (a warning says when it could matter).
    """
    name = OUTPUT_NAMES.get(card)
    if name is None:
        raise InputError(f"unknown rate card {card!r}: expected one of {sorted(CARD_FILES)}")
    if "model" not in frame.columns:
        raise InputError("price(): the table has no 'model' column")
    is_trial_table = "cycles" in frame.columns and "cycle" not in frame.columns
    original_index = frame.index
    frame = frame.reset_index(drop=True)  # positional labels: the caller's index may repeat
    tokens = _Tokens.of(frame)
    result = pd.Series(pd.NA, index=frame.index, dtype="Float64", name=name)
    started = frame["started_at"] if "started_at" in frame else pd.Series(pd.NA, index=frame.index)
    unknown: list[str] = []
    unsplit = long_trials = undated = 0
    for model, idx in frame.groupby(frame["model"].astype("string").fillna("<missing>"), sort=False).groups.items():
        rows = _match_model(str(model), card)
        if not rows:
            unknown.append(str(model))
            continue
        pick, no_day = _in_force(rows, started[idx])
        undated += no_day
        for k in np.unique(pick):
            at = idx[pick == k]
            priced = _model_cost(rows[k], tokens.at(at), str(model), original_index, is_trial_table)
            result[at] = priced.cost
            unsplit += priced.unsplit
            long_trials += priced.long_trials
    _warn(card, unknown, unsplit, long_trials, undated)
    result.index = original_index
    return result


@dataclass(frozen=True)
class _Tokens:
    """A table's token columns as nullable floats (``write_1h`` NA where no split is known)."""

    input: pd.Series
    read: pd.Series
    write: pd.Series
    write_1h: pd.Series
    output: pd.Series

    @classmethod
    def of(cls, frame: pd.DataFrame) -> _Tokens:
        if "cache_write_1h_tokens" in frame:
            write_1h = frame["cache_write_1h_tokens"].astype("Float64")
        else:
            write_1h = pd.Series(pd.NA, index=frame.index, dtype="Float64")
        return cls(
            _column(frame, "input_tokens"),
            _column(frame, "cache_read_tokens"),
            _column(frame, "cache_write_tokens"),
            write_1h,
            _column(frame, "output_tokens"),
        )

    def at(self, idx: pd.Index) -> _Tokens:
        return _Tokens(self.input[idx], self.read[idx], self.write[idx], self.write_1h[idx], self.output[idx])


@dataclass(frozen=True)
class _Priced:
    """One model's rows priced, and what the warnings count: writes with no 5m/1h split, long trials."""

    cost: pd.Series
    unsplit: int
    long_trials: int


def _model_cost(row: dict, t: _Tokens, model: str, index: pd.Index, is_trial_table: bool) -> _Priced:
    """The rows of one model at its card row's rates, with the long-context surcharge on request rows."""
    r = _effective_rates(row)
    w = t.write
    if r["write_5m"] == r["input"] and r["write_1h"] == r["input"]:
        w = w.fillna(0)  # writes bill as input: a missing write count cannot change the price
    unsplit = int(((t.write_1h.isna()) & (w.fillna(0) > 0)).sum()) if r["write_1h"] != r["write_5m"] else 0
    w1 = t.write_1h.fillna(0)
    fresh = t.input - t.read - w
    bad = fresh < 0
    if bad.fillna(False).any():
        first = index[bad[bad.fillna(False)].index[0]]
        raise InputError(
            f"price(): row {first!r} ({model}): cache_read + cache_write exceed input_tokens; "
            "canonical rows hold every prompt token in input_tokens"
        )
    input_part = fresh * r["input"] + t.read * r["cached_input"] + (w - w1) * r["write_5m"] + w1 * r["write_1h"]
    cost = (input_part + t.output * r["output"]) / PER_MILLION
    long, long_trials = row.get("long_context"), 0
    if long:
        over = (t.input > long["above_input_tokens"]).fillna(False)
        if is_trial_table:
            long_trials = int(over.sum())
        else:
            surcharge = (
                input_part * (long["input_x"] - 1) + t.output * r["output"] * (long["output_x"] - 1)
            ) / PER_MILLION
            cost = cost.where(~over, cost + surcharge)
    return _Priced(cost, unsplit, long_trials)


def _warn(card: Card, unknown: list[str], unsplit: int, long_trials: int, undated: int) -> None:
    """Say what was priced as NA or approximately, once per call (``stacklevel`` points at the caller)."""
    if unknown:
        warnings.warn(
            f"no {card} rate for model(s) {', '.join(sorted(unknown))}: priced as NA, not zero "
            f"(see kit.analysis.pricing.rate_card({card!r}))",
            stacklevel=3,
        )
    if unsplit:
        warnings.warn(
            f"{unsplit} row(s) wrote to the cache with no 5m/1h split: priced at the 5-minute write rate",
            stacklevel=3,
        )
    if long_trials:
        warnings.warn(
            f"{long_trials} trial(s) hold more input tokens than a long-context threshold: the surcharge applies "
            "per request, which a trial sum cannot show; use kit.analysis.pricing.price_by_trial(requests) "
            "for exact costs",
            stacklevel=3,
        )
    if undated:
        warnings.warn(
            f"{undated} row(s) of a model whose price changed on a date have no started_at: priced at its newest row",
            stacklevel=3,
        )


def price_by_trial(requests: pd.DataFrame, card: Card = "usd") -> pd.Series:
    """Exact per-trial cost: price every request, then sum per ``trial_id`` (NA if any request is NA)."""
    per_request = price(requests, card)
    return per_request.groupby(requests["trial_id"], sort=False).sum(skipna=False, min_count=1).rename(per_request.name)


def structural_price_by_trial(requests: pd.DataFrame, card: Card = "usd") -> pd.Series:
    """Each trial's structural-cache cost (docs/method.md#structural-cache): its requests billed as an ideal per-trial
    prefix cache would bill them, the cost-like figure that does not depend on the server.

    ``requests``: one row per request with ``trial_id``, ``model``, ``input_tokens`` (its segments' sum),
    ``structural_cached`` (``kit.analysis.cachemodel.structural``) and ``output_tokens``. The structural cached
    tokens bill at the cached rate; every other prompt token is new to the cache, so it is written (an ideal cache
    stores every prefix): at the card's 5-minute write rate where writes carry a surcharge (Anthropic), at the input
    rate where they do not (OpenAI, the Codex credit card); output at the output rate. NA where the model has no
    card row or a count is missing, as :func:`price_by_trial`.
    """
    for column in ("trial_id", "model", "input_tokens", "structural_cached", "output_tokens"):
        if column not in requests.columns:
            raise InputError(f"structural_price_by_trial(): the table has no {column!r} column")
    cached = requests["structural_cached"].astype("Float64")
    billed = pd.DataFrame(
        {
            "trial_id": requests["trial_id"],
            "model": requests["model"],
            "input_tokens": requests["input_tokens"].astype("Float64"),
            "cache_read_tokens": cached,
            "cache_write_tokens": requests["input_tokens"].astype("Float64") - cached,
            "cache_write_1h_tokens": 0.0,
            "output_tokens": requests["output_tokens"].astype("Float64"),
        },
        index=requests.index,
    )
    if "started_at" in requests:
        billed["started_at"] = requests["started_at"]
    return price_by_trial(billed, card).rename("structural_cost_usd" if card == "usd" else "structural_credits")
