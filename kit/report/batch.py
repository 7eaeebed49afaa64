"""The written report of a batch: ``report.md`` and ``report.html`` beside the figures.

Why this shape: the report is what people quote, so its sentences follow the seeds' honest form.
Total tokens is the headline sentence; uncached tokens is a separate sentence that carries the observed
cache hit rates and says it depends on warmth (docs/method.md#totals); never one blended range. Everything a reader
must discount (simulation, cross-run stitches, small n, failed trials, quality drift) is listed as a
warning near the top, not buried under the figures. Each warning cites the section of docs/method.md
that explains it. Tables get human headers and one cell per interval ("1.45–76.63"), and the HTML page
keeps wide tables inside the page (they scroll sideways) rather than spilling past it.
"""

from __future__ import annotations

import html
import math
import os
import re
from collections.abc import Iterable
from pathlib import Path

import mistune
import pandas as pd

from kit import stats
from kit.analysis import occupancy_block
from kit.analysis.design_table import ARM_COLUMNS, shared_prefix_label
from kit.charts import METRIC_LABELS, grade_summary
from kit.charts.style import truthy
from kit.experiment.design import ParamError
from kit.experiment.layout import BatchDir
from kit.files import write_text
from kit.records import UNSET, Design
from kit.schema import QUOTA

SIMULATION_BANNER = (
    "SIMULATION: measured on the kit's embedded provider with a scripted model. "
    "These numbers describe the simulation, not any real model's cost."
)
STITCH = "cross-run stitch"
_CSS = """
body { font-family: system-ui, sans-serif; max-width: 980px; margin: 2em auto; padding: 0 1em; line-height: 1.45; }
div.table-wrap { overflow-x: auto; max-width: 100%; margin: 0.8em 0; }
table { border-collapse: collapse; table-layout: auto; font-size: 0.82em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
td.interval, td.number { white-space: nowrap; }
img { max-width: 100%; }
p.banner { background: #fde8ea; border: 2px solid #b00020; color: #7a0016; padding: 0.6em; font-weight: bold; }
"""


# ---------------------------------------------------------------- numbers into words


def _num(value) -> float:
    """A float, NaN for anything missing (pd.NA, None, '')."""
    try:
        return float(value) if value is not None and not pd.isna(value) and value != "" else math.nan
    except (TypeError, ValueError):
        return math.nan


def _pct(value) -> str:
    return "unknown" if math.isnan(_num(value)) else f"{_num(value):.0%}"


def _off_one(value: float, text: str) -> str:
    """``text``, or ``value`` with as many more decimals as it takes not to read 1 when it is not 1.

    Whether a ratio's interval includes no difference is decided on the unrounded bounds; a bound of 1.0041
    printed "1.00" beside "excludes" and 0.9976 printed "1.00" beside "includes" read as a contradiction
    (issue #30 item 7), so a bound near 1 shows the digit that puts it on its side: 1.004, 0.998.
    """
    decimals = 2
    while value != 1 and float(text) == 1 and decimals < 17:
        decimals += 1
        text = f"{value:.{decimals}f}"
    return text


def _bound(value: float) -> str:
    """One interval bound: thousands for token counts, 3 significant digits below 1, else 2 decimals; never a
    bare "1.00" for a bound that is not 1 (:func:`_off_one`)."""
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return _off_one(value, f"{value:.2f}" if abs(value) >= 1 else f"{value:#.3g}")


def interval(lower, upper) -> str:
    """An interval as one table cell, "1.45–76.63" ("-0.20 to +0.03" when a bound is negative); '—' if missing.

    One cell, never two columns: the pair is read together, and the HTML keeps it on one line.
    """
    lo, hi = _num(lower), _num(upper)
    if math.isnan(lo) or math.isnan(hi):
        return "—"
    if lo < 0 or hi < 0:
        return f"{lo:+.2f} to {hi:+.2f}"
    return f"{_bound(lo)}–{_bound(hi)}"


def _schedule_word(design: Design) -> str:
    return "blocked" if "block" in design.schedule.lower() else "interleaved"


def _count_word(n: int) -> str:
    return "one" if n == 1 else str(n)


def _n_phrase(row: pd.Series) -> str:
    n_arm, n_base = _num(row.get("n_arm")), _num(row.get("n_baseline"))
    if math.isnan(n_arm) or math.isnan(n_base):
        return "n not reported"
    if n_arm == n_base:
        return f"n = {int(n_arm)} runs per arm"
    return f"n = {int(n_arm)} ({row['arm']}) and {int(n_base)} ({row['baseline']}) runs"


def _batch_phrase(row: pd.Series, design: Design) -> str:
    batches = _num(row.get("batches"))
    if math.isnan(batches):
        batches = len(design.batch) if isinstance(design.batch, list) else 1
    batches = int(batches)
    if str(row.get("label") or "") == STITCH:
        return f"a cross-run stitch of {batches} batches, not one interleaved batch"
    plural = "batch" if batches == 1 else "batches"
    return f"{_count_word(batches)} {_schedule_word(design)} {plural}"


def _ci_text(lo: float, hi: float) -> str:
    """'1.30–1.56': two bounds, each with the digits that keep it on its side of 1 (:func:`_off_one`)."""
    return f"{_off_one(lo, f'{lo:.2f}')}–{_off_one(hi, f'{hi:.2f}')}"


def _family_clause(row: pd.Series) -> str:
    """'; decisive among the family's 2 comparisons (Holm: 97.5% CI 0.61–0.80)', or '' outside a family of several.

    docs/method.md#family: several comparisons at 95% each would call one decisive by luck more often than 5%.
    """
    size, level = _num(row.get("family_size")), _num(row.get("family_level"))
    lo, hi = _num(row.get("family_lower")), _num(row.get("family_upper"))
    if math.isnan(size) or size < 2 or math.isnan(level):
        return ""
    ci = "no interval" if math.isnan(lo) or math.isnan(hi) else f"{level * 100:.4g}% CI {_ci_text(lo, hi)}"
    word = "decisive" if truthy(row.get("decisive")) else "not decisive"
    return f"; {word} among the family's {int(size)} comparisons (Holm: {ci})"


def _coverage_clause(row: pd.Series) -> str:
    """' (such intervals covered about 90% in the known-truth study, not 95%)', from the row's ``study_coverage``.

    A "95% CI" is what the method aims at; what it held in batches like this one (arms of one shape or not, this
    many runs) is what the study measured (``kit.stats.coverage``), and a reader quoting the interval needs both.
    """
    covered, conf = _num(row.get("study_coverage")), _num(row.get("confidence"))
    if math.isnan(covered):
        return ""
    aim = 0.95 if math.isnan(conf) else conf
    short = f", not {aim:.0%}" if covered < stats.coverage.BAND_LOW else ""
    flagged = isinstance(row.get("interval_rests_on"), str) and bool(row.get("interval_rests_on"))
    n = min(_num(row.get("n_arm")), _num(row.get("n_baseline")))
    case = stats.study_coverage(int(n), flagged) if not math.isnan(n) else None
    spread = (
        f", {case.lowest:.0%}–{case.highest:.0%} by shape" if case is not None and case.lowest < case.highest else ""
    )
    return f" (such intervals covered about {covered:.0%} in the known-truth study{spread}{short})"


def _capped_clause(row: pd.Series, lo: float, hi: float) -> str:
    """', its lower bound 0.248 capped: the smallest ratio any resample of these runs gives, a limit of the data, not a
    confidence bound' — for a row whose interval was capped at the data's range (``bound_beyond_data``), naming the
    bound in the ratio's units; '' otherwise (a paired row is flagged without a cap: its bounds stay the model's)."""
    if not truthy(row.get("bound_beyond_data")) or truthy(row.get("paired")):
        return ""
    low, high = _num(row.get("resample_min")), _num(row.get("resample_max"))
    sides = [
        (name, v) for name, v, edge in (("lower", lo, low), ("upper", hi, high)) if math.isclose(v, edge, rel_tol=1e-9)
    ]
    if not sides:
        return ", capped where these runs end: no resample of them gives a ratio beyond it"
    which = " and ".join(f"{name} bound {_bound(v)}" for name, v in sides)
    extreme = (
        "the most extreme ratios"
        if len(sides) == 2
        else f"the {'smallest' if sides[0][0] == 'lower' else 'largest'} ratio"
    )
    return (
        f", its {which} capped: {extreme} any resample of these runs gives, a limit of the data, not a confidence bound"
    )


def _conf_text(row: pd.Series) -> str:
    """'95% CI', or for a batch grown by the stop rule the interval it published: '99.39% anytime-valid CI over
    9 looks' (``exclude_one``) or '97% CI of the precision stop, over 9 looks' (``looks`` in ratios.csv)."""
    conf, looks = _num(row.get("confidence")), _num(row.get("looks"))
    level = f"{(0.95 if math.isnan(conf) else conf) * 100:.4g}%"
    if math.isnan(looks) or looks < 1:
        return f"{level} CI"
    plural = "look" if looks == 1 else "looks"
    if "anytime-valid" in str(row.get("note") or ""):
        return f"{level} anytime-valid CI over {int(looks)} {plural}"
    return f"{level} CI of the precision stop, over {int(looks)} {plural}"


def _ratio_phrase(row: pd.Series, what: str) -> str:
    """'batching feeds 1.43× fewer total tokens than placebo (95% CI 1.30–1.56× fewer; ratio 0.70, 95% CI 0.64–0.77'
    — the open clause; the caller closes the parenthesis with n and the batch facts.

    One direction per sentence (issue #30 item 7): the factor and its interval in the factor's units, the ratio
    (mean(arm) / mean(baseline)) and its interval in the ratio's. An interval that holds 1 is a null result and is
    worded as one, whatever side of 1 the estimate fell on; the verdict is taken on unrounded bounds.
    """
    est, lo, hi = (_num(row.get(c)) for c in ("estimate", "lower", "upper"))
    conf_text = _conf_text(row)
    arm, baseline = row["arm"], row["baseline"]
    no_ci = math.isnan(lo) or math.isnan(hi)
    if no_ci:
        few = truthy(row.get("small_n"))
        ci = f"{conf_text} not available" + (": fewer than 5 runs per arm" if few else "")
        if est == 1:
            return f"{arm} feeds as many {what} as {baseline} (ratio 1.00; {ci}"
        word = "fewer" if est < 1 else "more"
        factor = 1 / est if est < 1 else est
        return f"{arm} feeds {factor:.2f}× {word} {what} than {baseline} (ratio {est:.2f}; {ci}"
    capped = _capped_clause(row, lo, hi)
    ratio_ci = f"{conf_text} {_ci_text(lo, hi)}{capped}{_coverage_clause(row)}"
    if lo <= 1 <= hi:
        head = f"no difference in {what} shown between {arm} and {baseline} (ratio {_off_one(est, f'{est:.2f}')}; "
        return head + ratio_ci + ", which includes no difference" + _family_clause(row)
    if est < 1:  # the same interval twice, so the ratio's carries only its level
        fewer = f"{conf_text} {_ci_text(1 / hi, 1 / lo)}× fewer"
        short = f"{conf_text.split(' ')[0]} CI {_ci_text(lo, hi)}{capped}{_coverage_clause(row)}"
        return (
            f"{arm} feeds {1 / est:.2f}× fewer {what} than {baseline} ({fewer}; ratio {est:.2f}, {short}"
            + _family_clause(row)
        )
    return f"{arm} feeds {est:.2f}× more {what} than {baseline} (ratio {est:.2f}; {ratio_ci}" + _family_clause(row)


def _metric_rows(ratios: pd.DataFrame, metric: str) -> pd.DataFrame:
    if ratios.empty or "metric" not in ratios.columns:
        return ratios.iloc[0:0]
    return ratios[(ratios["metric"] == metric) & ratios["estimate"].notna()]


def _treatments(rows: pd.DataFrame, design: Design) -> pd.DataFrame:
    """The rows that compare treatments: a control (``design.control_arms``) measures contamination, so it is shown as
    the control beside the comparisons and never quoted as a treatment's effect (docs/method.md#controls)."""
    if rows.empty or not design.control_arms:
        return rows
    return rows[
        ~rows["arm"].astype(str).isin(design.control_arms) & ~rows["baseline"].astype(str).isin(design.control_arms)
    ]


def total_sentences(
    ratios: pd.DataFrame, design: Design, headline: pd.DataFrame | None = None, quality: pd.DataFrame | None = None
) -> list[str]:
    """The headline: one total-token sentence per comparison of treatments (docs/method.md#totals: total is
    cache-independent); a control's row is not a claim. With ``quality`` (analysis/quality.csv) each sentence says
    whether quality parity was shown, and an arm whose grade is worse beyond the margin gets no efficiency sentence
    at all (:func:`quality_sentence`, docs/method.md#grading)."""
    rows = _treatments(_metric_rows(ratios, "total_tokens"), design)
    if rows.empty and headline is not None:
        rows = _treatments(_ratios_from_headline(headline, design), design)
    out = []
    for _, row in rows.iterrows():
        gate = _gate(quality, row["arm"], row["baseline"])
        if gate is not None and gate["verdict"] == stats.quality.WORSE:
            out.append(quality_sentence(gate))
            continue
        sentence = f"{_ratio_phrase(row, 'total tokens')}; {_n_phrase(row)}, {_batch_phrase(row, design)})."
        out.append(sentence + (f" {quality_sentence(gate)}" if gate is not None else ""))
    return out


def _gate(quality: pd.DataFrame | None, arm: str, baseline: str) -> pd.Series | None:
    """The quality.csv row of (arm, baseline), or None (an analysis older than the gate, a control's pair)."""
    if quality is None or quality.empty or "verdict" not in quality.columns:
        return None
    found = quality[(quality["arm"].astype(str) == str(arm)) & (quality["baseline"].astype(str) == str(baseline))]
    return found.iloc[0] if len(found) else None


def quality_sentence(gate: pd.Series) -> str:
    """What the grades show beside an efficiency claim (``kit.stats.quality_gate``, docs/method.md#grading).

    Quality before economy: the claim stands only with the grade difference's interval against the margin; when the
    interval does not exclude a loss beyond it, the sentence says parity is not shown (and how many graded runs would
    show it); an arm worse beyond the margin gets this sentence instead of any efficiency claim.
    """
    arm, base, margin = gate["arm"], gate["baseline"], _num(gate["margin"])
    diff, lo, hi = _num(gate.get("difference")), _num(gate.get("lower")), _num(gate.get("upper"))
    conf = _num(gate.get("confidence"))
    grades = f"grade difference {arm} − {base} {diff:+.2f} ({conf:.0%} CI {lo:+.2f} to {hi:+.2f}, Newcombe)"
    verdict = gate["verdict"]
    if verdict == stats.quality.NOT_GRADED:
        return f"The answers were not graded: this batch cannot show that {arm} answers as well as {base}."
    if verdict == stats.quality.WORSE:
        return (
            f"No efficiency headline for {arm} against {base}: its answers are worse beyond the non-inferiority margin "
            f"{margin:g} ({grades}); fewer tokens for worse answers are not a saving (docs/method.md#grading)."
        )
    if verdict == stats.quality.PARITY_SHOWN:
        return f"Quality parity shown: {grades}, above the non-inferiority margin −{margin:g}."
    needed = _num(gate.get("runs_for_parity"))
    more = (
        f"; about {int(needed)} graded runs per arm would show it if the arms score alike"
        if not math.isnan(needed)
        else ""
    )
    return (
        f"Quality parity is not shown: the {grades} does not exclude a loss beyond the non-inferiority margin "
        f"{margin:g} (`quality_margin`){more}."
    )


def uncached_sentences(ratios: pd.DataFrame, design: Design) -> list[str]:
    """Uncached tokens, separately, always with the observed hit rates it was measured at.

    Where every trial's first request shares a cacheable head
    (:func:`kit.analysis.design_table.shared_prefix_label`), each provider-uncached sentence says it is diagnostic:
    a reader quoting one sentence must not lose that. The structural figure keeps each trial in its own cache
    domain, so the shared head cannot touch it.
    """
    sentences = []
    diagnostic = _diagnostic_note(design)
    for _, row in _treatments(_metric_rows(ratios, "uncached_input_tokens"), design).iterrows():
        hits = (
            f"at observed cache hit rates {_pct(row.get('hit_rate_arm'))} ({row['arm']}) "
            f"and {_pct(row.get('hit_rate_baseline'))} ({row['baseline']})"
        )
        where = f" in batch {row['from_batch']}" if _one_batch_of_several(row) else ""
        sentences.append(
            f"uncached tokens{where}: {_ratio_phrase(row, 'uncached input tokens')}; {_n_phrase(row)}, "
            f"{_batch_phrase(row, design)}) {hits}; this figure depends on cache warmth{diagnostic}."
        )
    costs = _metric_rows(ratios, "structural_cost_usd")
    for _, row in _treatments(_metric_rows(ratios, "structural_uncached"), design).iterrows():
        cost = costs[(costs["arm"] == row["arm"]) & (costs["baseline"] == row["baseline"])]
        sentences.append(
            f"structural (modelled) uncached tokens: {_ratio_phrase(row, 'uncached input tokens')}; "
            f"{_n_phrase(row)}) — the recorded prompts replayed through the kit's cache model, "
            "not the provider's cache" + (f"; {_cost_phrase(cost.iloc[0])}." if len(cost) else ".")
        )
    return sentences


def _cost_phrase(row: pd.Series) -> str:
    """'in dollars, structural-cache cost ratio 0.88 (95% CI 0.80–0.95)': the structural figure priced
    (docs/method.md#structural-cache), beside its tokens."""
    lo, hi = _num(row.get("lower")), _num(row.get("upper"))
    ci = "no interval" if math.isnan(lo) or math.isnan(hi) else f"95% CI {_bound(lo)}–{_bound(hi)}"
    return f"its structural-cache cost at the dated USD rates: ratio {_num(row['estimate']):.2f} ({ci})"


def _one_batch_of_several(row: pd.Series) -> bool:
    """Whether a ratio row is one batch's figure in an analysis of several (``from_batch`` set: a cache-dependent
    figure stays at its own batch's warmth, docs/method.md#warmth)."""
    batch = row.get("from_batch")
    return isinstance(batch, str) and bool(batch)


def _diagnostic_note(design: Design) -> str:
    """' (diagnostic: every trial's first request shares its first 1,256 tokens, …)' or '' without a shared head."""
    if shared_prefix_label(design) is None:
        return ""
    return (
        f" (diagnostic: every {_isolated(design)}trial's first request shares its first "
        f"{design.shared_first_prefix_tokens:,} "
        "tokens, so another trial's cache can serve them; docs/method.md#isolation)"
    )


def _isolated(design: Design) -> str:
    """'isolated ' where a control ran beside the isolated arms (the shared head is measured without it), else ''."""
    return "isolated " if design.control_arms else ""


def _runs_needed_sentences(ratios: pd.DataFrame, trials: pd.DataFrame, design: Design) -> list[str]:
    """How many runs per arm this effect needs, planned from these trials as a pilot (docs/method.md#planning).

    The pilot's CVs are raised to an upper confidence bound (``kit.stats.plan``'s ``cv_bound``): from the
    sample CVs of five runs the plan fell about 2x short; the sentence names the bound and its assurance.
    """
    out = []
    level = stats.PILOT_CV_BOUND
    for _, row in _treatments(_metric_rows(ratios, "total_tokens"), design).iterrows():
        est = _num(row.get("estimate"))
        if math.isnan(est) or est == 1 or "arm" not in trials.columns:
            continue
        pilot = trials[trials["arm"].isin([row["arm"], row["baseline"]])]
        try:
            opts = {"pilot": pilot, "arm": row["arm"], "baseline": row["baseline"], "cv_bound": level}
            detect, resolve = stats.plan(effect=est, **opts), stats.plan(precision=1.5, **opts)
        except ParamError:
            continue
        out.append(
            f"Runs needed ({row['arm']} vs {row['baseline']}, total tokens), planned {detect.source} "
            f"({detect.cv_arm:.2f} and {detect.cv_baseline:.2f}): to tell this effect (ratio {est:.2f}) from no "
            f"difference about {detect.runs_per_arm} runs per arm, to resolve it to "
            f"±{resolve.plus_minus - 1:.0%} (x/÷{resolve.plus_minus:.2f}) about {resolve.runs_per_arm}; "
            f"this comparison has {_num(row.get('n_arm')):.0f} and {_num(row.get('n_baseline')):.0f}. "
            f"At that bound a pilot's plan covers the runs the target needs with about {level:.0%} assurance "
            "(bench/known_truth.md#planner: not on Pareto-tailed arms, whose few runs hide the tail), and a batch "
            "of the planned size reaches the target half the time (kit.stats.plan)."
        )
    return out


def _ratios_from_headline(headline: pd.DataFrame, design: Design) -> pd.DataFrame:
    """Ratio rows rebuilt from headline.csv when ratios.csv has no total-token row."""
    ratio_col = next((c for c in ("ratio", "ratio_vs_baseline") if c in headline.columns), None)
    if ratio_col is None or headline.empty:
        return pd.DataFrame()
    base_rows = headline[headline[ratio_col].isna()]
    baseline = design.baseline or (str(base_rows["arm"].iloc[0]) if len(base_rows) == 1 else None)
    if baseline is None:
        return pd.DataFrame()
    n_base = headline.loc[headline["arm"].astype(str) == baseline, "n"]
    rows = []
    for _, row in headline[headline[ratio_col].notna()].iterrows():
        rows.append(
            {
                "arm": str(row["arm"]),
                "baseline": baseline,
                "estimate": row[ratio_col],
                "lower": row.get("ratio_lower"),
                "upper": row.get("ratio_upper"),
                "n_arm": row.get("n"),
                "n_baseline": n_base.iloc[0] if len(n_base) else None,
                "label": row.get("label", ""),
            }
        )
    return pd.DataFrame(rows)


NO_HEADLINE = (
    "No efficiency headline: an arm that cannot do the task makes every ratio a comparison with a failure, however "
    "few tokens it took (docs/method.md#grading); the comparisons are in the tables below, not claims."
)


def unable_sentences(design: Design) -> list[str]:
    """The report's first lines when an arm could not do the task (``design.unable``): which arm, what its trials
    show, and that the batch has no efficiency headline. Empty otherwise."""
    if not design.unable:
        return []
    return [f"Cannot do the task: {u.reason}." for u in design.unable] + [NO_HEADLINE]


def headline_text(
    headline: pd.DataFrame, ratios: pd.DataFrame, design: Design, quality: pd.DataFrame | None = None
) -> str:
    """The honest headline, one line each: total-token sentence(s), then uncached sentence(s) apart; or, when an arm
    could not do the task, that and no headline (:func:`unable_sentences`).

    Reused by ``python -m kit batch``; a simulated batch says so on its first line.
    """
    lines = unable_sentences(design) or total_sentences(ratios, design, headline, quality)
    if not lines:
        lines = ["no total-token comparison between arms is available."]
    lines += [] if design.unable else uncached_sentences(ratios, design)
    if design.simulated:
        lines.insert(0, SIMULATION_BANNER)
    return "\n".join(lines)


# ---------------------------------------------------------------- the cache: isolation and the control


def contamination_sentences(design: Design) -> list[str]:
    """What the control measured: its first requests' cached tokens against the isolated arms'
    (``design.first_request_reads``; docs/method.md#controls).

    A trial's first request comes before the trial wrote anything, so what it reads another trial left. The control
    runs without isolation: its figure is the contamination isolation removed, visible only in the requests table
    until the report says it. The isolated arms' figure should be 0; where it is not, isolation did not hold.
    """
    rows = [r for r in design.first_request_reads if r.trials]
    if not rows:
        return []
    isolated = [r for r in rows if not r.control]
    n_iso = sum(r.trials for r in isolated)
    iso_mean = sum((r.cached_mean or 0) * r.trials for r in isolated) / n_iso if n_iso else math.nan
    iso = (
        f"the isolated arms' {iso_mean:,.0f} ({sum(r.reading for r in isolated)} of {n_iso} read any)"
        if n_iso
        else "no isolated arm's first request is known"
    )
    out = []
    for c in (r for r in rows if r.control):
        out.append(
            f"Contamination the control shows: {c.arm}'s first requests read {c.cached_mean or 0:,.0f} cached tokens "
            f"on average from earlier trials ({c.reading} of {c.trials} read any), {iso} (docs/method.md#controls)."
            + ("" if c.reading else " The control read nothing from other trials: there was none to remove here.")
        )
    if not out:
        out.append(
            "No non-isolated control arm ran: what isolation removed is not measured (docs/method.md#replication); "
            f"first requests: {iso.removeprefix('the ')}."
        )
    if n_iso and iso_mean > 0:
        out.append(
            "Isolated trials' first requests read tokens another trial wrote: isolation did not separate every "
            "trial's prefix (docs/method.md#isolation)."
        )
    return out


STRUCTURAL_VS_OBSERVED = (
    "Structural against observed, per arm: the structural model is an ideal per-trial prefix cache (every earlier "
    "prompt of the trial kept, no minimum, no expiry; docs/method.md#structural-cache), the observed figure what "
    "the provider's cache served. Observed below structural is what the provider's minimum, rounding and expiry "
    "withheld; observed above it came from other trials' prefixes."
)


def _mean(values: pd.Series) -> float:
    return float(pd.to_numeric(values, errors="coerce").astype(float).mean())


def _usd(trials: pd.DataFrame, column: str) -> str:
    """A mean price per trial in dollars to the cent's hundredth ('$0.0304'), '—' where unpriced (no rate card row)."""
    mean = _mean(trials[column]) if column in trials.columns else math.nan
    return "—" if math.isnan(mean) else f"${mean:.4f}"


def structural_vs_observed(trials: pd.DataFrame) -> pd.DataFrame:
    """Per arm, the provider's cache against the structural model: cached shares, uncached and USD per trial.

    ``observed / structural`` is the observed cached share over the structural one: 1 is a cache as good as the
    ideal one, below 1 what the provider withheld, above 1 reads from other trials (a control, a shared head).
    """
    need = {"arm", "input_tokens", "cache_read_tokens", "structural_uncached"}
    ok = stats.finished(trials) if "status" in trials.columns else trials
    if not need <= set(ok.columns) or ok.empty:
        return pd.DataFrame()
    rows = []
    for arm, g in ok.groupby(ok["arm"].astype(str), sort=False):
        known = g.dropna(subset=["input_tokens", "cache_read_tokens", "structural_uncached"])
        total = float(pd.to_numeric(known["input_tokens"]).sum())
        observed = float(pd.to_numeric(known["cache_read_tokens"]).sum()) / total if total else math.nan
        ideal = 1 - float(pd.to_numeric(known["structural_uncached"]).sum()) / total if total else math.nan
        rows.append(
            {
                "arm": arm,
                "trials": len(known),
                "cached: observed": _share(observed),
                "cached: structural": _share(ideal),
                "observed / structural": observed / ideal if ideal else math.nan,
                "uncached per trial: observed": _mean(known["input_tokens"]) - _mean(known["cache_read_tokens"]),
                "uncached per trial: structural": _mean(known["structural_uncached"]),
                "USD per trial: observed": _usd(g, "cost_usd"),
                "USD per trial: structural": _usd(g, "structural_cost_usd"),
            }
        )
    return pd.DataFrame(rows)


def cache_section(design: Design, trials: pd.DataFrame | None = None) -> list[str]:
    """The report's cache section: the contamination the control shows (docs/method.md#controls), then each arm's
    observed cache against the structural model, in tokens and dollars (docs/method.md#structural-cache). An
    analysis written before the section existed (no ``first_requests`` in its design.json) gets none until it is
    analysed again: its report stays the one it was."""
    if design.first_requests is UNSET:
        return []
    sentences = contamination_sentences(design)
    table = structural_vs_observed(trials) if trials is not None else pd.DataFrame()
    if not sentences and table.empty:
        return []
    out = ["## Cache", ""] + ([" ".join(sentences), ""] if sentences else [])
    if not table.empty:
        out += [STRUCTURAL_VS_OBSERVED, "", md_table(table), ""]
    return out


# ---------------------------------------------------------------- several batches


def batches_section(trials: pd.DataFrame, ratios: pd.DataFrame, design: Design) -> list[str]:
    """What each batch contributed, when several were analysed together: its salt, its finished trials per arm, its
    observed hit rate and the comparisons it entered (those whose two arms it holds). Nothing for one batch.

    Why: a batch lacking an arm still counts for the comparisons it can make, and a reader must see which numbers
    pool which batches; the uncached figure stays per batch (docs/method.md#warmth).
    """
    if "batch" not in trials.columns or trials["batch"].nunique() < 2:
        return []
    names = design.batch if isinstance(design.batch, list) else [design.batch]
    salts = dict(zip(names, design.salts, strict=False))
    compared = [] if ratios.empty else zip(ratios["arm"].astype(str), ratios["baseline"].astype(str), strict=True)
    pairs = list(dict.fromkeys(compared))
    rows = []
    for batch, group in trials.groupby(trials["batch"].astype(str), sort=False):
        ok = stats.finished(group)
        have = set(ok["arm"].astype(str))
        counts = []
        for arm, mine in group.groupby(group["arm"].astype(str), sort=False):
            failed = int((mine["status"].astype(str) == "failed").sum())
            counts.append(f"{arm} {len(mine) - failed}" + (f" ({failed} failed)" if failed else ""))
        isolated = ok[~ok["arm"].astype(str).isin(design.control_arms)]
        rows.append(
            {
                "batch": batch,
                "salt": salts.get(batch, ""),
                "finished trials per arm": ", ".join(counts),
                "hit rate (isolated arms)": _pct(stats.hit_rate(isolated)),
                "comparisons it enters": ", ".join(f"{a} vs {b}" for a, b in pairs if {a, b} <= have) or "none",
            }
        )
    intro = (
        "Each batch's part. Total tokens and the structural figure pool the batches that hold both arms of a "
        "comparison; uncached tokens and cost stay per batch, at the warmth that batch saw (docs/method.md#warmth)."
    )
    return ["## Batches", "", intro, "", md_table(pd.DataFrame(rows)), ""]


# ---------------------------------------------------------------- warnings


def derived_warnings(ratios: pd.DataFrame, trials: pd.DataFrame, design: Design) -> list[str]:
    """What a reader must discount, derived from the tables themselves."""
    out: list[str] = []
    if design.simulated:
        out.append("simulation: the embedded provider and a scripted model produced these numbers.")
    out += [f"cannot do the task: {u.reason}; no efficiency headline (docs/method.md#grading)." for u in design.unable]
    if label := shared_prefix_label(design):
        out.append(label)
    if not ratios.empty:
        flagged = ratios.assign(
            comparison=ratios.get("comparison", ratios["arm"].astype(str) + " vs " + ratios["baseline"].astype(str)),
            stitch=ratios.get("label", pd.Series("", index=ratios.index)).astype(str) == STITCH,
            small=ratios.get("small_n", pd.Series(False, index=ratios.index)).fillna(False).astype(bool),
        )
        for comparison, rows in flagged.groupby("comparison", sort=False):
            if rows["stitch"].any():
                out.append(
                    f"cross-run stitch: {comparison} ({', '.join(map(str, rows.loc[rows['stitch'], 'metric']))}) "
                    "divides arms measured in different batches, not one interleaved batch (docs/method.md#stitch)."
                )
            small = rows[rows["small"]]
            if len(small):
                row = small.iloc[0]
                each = [_one_batch_of_several(r) for _, r in small.iterrows()]
                per_batch = " (per batch: uncached tokens and cost)" if all(each) else ""
                out.append(
                    f"small n: {comparison}{per_batch} rests on n = {_num(row.get('n_arm')):.0f} ({row['arm']}) and "
                    f"{_num(row.get('n_baseline')):.0f} ({row['baseline']}), fewer than 5 in an arm; "
                    "treat its ratios as effect-size estimates (docs/method.md#intervals)."
                )
            rests = rows[
                rows.get("interval_rests_on", pd.Series("", index=rows.index)).astype("string").fillna("") != ""
            ]
            if len(rests):
                out.append(_shape_warning(comparison, rests))
        for _, row in _metric_rows(ratios, "grade").iterrows():
            if _num(row.get("upper")) < 0:
                out.append(
                    f"quality drift: {row['arm']} grades {abs(_num(row['estimate'])):.2f} lower than "
                    f"{row['baseline']} (CI {_num(row['lower']):+.2f} to {_num(row['upper']):+.2f}); "
                    "a cheaper arm may be a worse one (docs/method.md#grading)."
                )
        out += _replication_warnings(ratios, trials)
    out += _trial_warnings(trials)
    return out


def _shape_warning(comparison: str, rests: pd.DataFrame) -> str:
    """'arms of different shape: a vs b (total_tokens) …': the flagged rows' noisier arm, how much more its runs vary,
    and what the study's intervals covered in batches like it (``kit.stats.coverage``, docs/method.md#intervals)."""
    row = rests.iloc[0]
    spread, covered = _num(row.get("cv_ratio")), _num(row.get("study_coverage"))
    varies = f" vary {spread:.1f}× as much as the other arm's (sample CV)" if not math.isnan(spread) else " vary more"
    measured = (
        f"in the known-truth study such 95% intervals covered about {covered:.0%}"
        if not math.isnan(covered)
        else stats.ONE_ARM_NOTE
    )
    return (
        f"one-arm interval: {comparison} ({', '.join(map(str, rests['metric']))}) rests on "
        f"{row['interval_rests_on']}'s runs alone: its runs{varies}, arms of different shape, and an arm's mean from "
        f"few runs misses long runs it did not draw; {measured} (docs/method.md#intervals)."
    )


def _replication_warnings(ratios: pd.DataFrame, trials: pd.DataFrame) -> list[str]:
    """Whether the uncached ratio has the batches and the control a cache-dependent claim needs
    (docs/method.md#replication); the batches are counted from the per-batch rows where there are several."""
    uncached = _metric_rows(ratios, "uncached_input_tokens")
    if uncached.empty:
        return []
    batches = int(pd.to_numeric(uncached.get("batches", pd.Series([1])), errors="coerce").fillna(1).max())
    per_batch = uncached[[_one_batch_of_several(r) for _, r in uncached.iterrows()]]
    batches = max(batches, per_batch["from_batch"].nunique() if len(per_batch) else 0)
    has_control = "control" in trials.columns and trials["control"].fillna(False).astype(bool).any()
    if batches >= 3 and has_control:
        return []
    return [
        f"the uncached ratio rests on {_count_word(batches)} {'batch' if batches == 1 else 'batches'} "
        f"{'with' if has_control else 'without'} a non-isolated control; a cache-dependent claim needs "
        "≥ 3 batches plus one control (docs/method.md#replication). Read it as one point on the "
        "warmth curve (docs/method.md#warmth)."
    ]


def _trial_warnings(trials: pd.DataFrame) -> list[str]:
    out = []
    if "status" in trials.columns and not trials.empty:
        for arm, rows in trials.groupby(trials["arm"].astype(str), sort=True):
            failed = rows[rows["status"].astype(str) == "failed"]
            if len(failed):
                reasons = sorted({str(r) for r in failed.get("reason", pd.Series(dtype=str)).dropna() if str(r)})
                why = f" ({'; '.join(reasons)})" if reasons else ""
                out.append(
                    f"failed trials: {len(failed)} of {len(rows)} {arm} trials failed{why}; "
                    "they are counted here and excluded from every mean."
                )
    if "usage_known" in trials.columns:
        unknown = int((~trials["usage_known"].fillna(False).astype(bool)).sum())
        if unknown:
            out.append(f"usage unknown for {unknown} trial(s): their token sums are missing, not zero.")
    return out


# ---------------------------------------------------------------- markdown pieces


def _cell(value) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float | int) and not isinstance(value, bool):
        if math.isnan(float(value)):
            return "—"
        if float(value).is_integer() or abs(value) >= 100:
            return f"{value:,.0f}"
        return f"{value:.3g}" if abs(value) < 0.01 else f"{value:.2f}"
    if value is None or (not isinstance(value, list | tuple | dict) and pd.isna(value)):
        return "—"
    if isinstance(value, dict):
        return "; ".join(f"{k}={_cell(v)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ", ".join(map(_cell, value))
    return str(value).replace("|", "\\|").replace("\n", " ")


def md_table(df: pd.DataFrame) -> str:
    """A GitHub-style markdown table (no tabulate dependency); missing cells show as '—'."""
    if df.empty:
        return "_(no rows)_"
    lines = ["| " + " | ".join(map(str, df.columns)) + " |", "|" + "---|" * len(df.columns)]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(_cell(v.item() if hasattr(v, "item") else v) for v in row) + " |")
    return "\n".join(lines)


_DESIGN_ORDER = ["batch", "schedule", "order", "isolation", "simulated", "backend", "model", "versions"]
# Design fields shown in their own place: the per-arm table, the Warnings list (analyze folds them in), the cache
# section.
_SHOWN_ELSEWHERE = {"arm_settings", "run_warnings", "first_requests", "unable_arms"}


def _design_table(design: Design) -> str:
    """Every design fact as a row, the main ones first; ``stop_rule`` only when the batch had one (design.json
    leaves it out otherwise)."""
    facts = [k for k in design.__struct_fields__ if k not in _SHOWN_ELSEWHERE]
    facts = [k for k in facts if getattr(design, k) is not UNSET]
    keys = [k for k in _DESIGN_ORDER if k in facts] + sorted(k for k in facts if k not in _DESIGN_ORDER)
    rows = [{"fact": k, "value": getattr(design, k)} for k in keys]
    return md_table(pd.DataFrame(rows, columns=["fact", "value"]))


def _arm_settings_lines(design: Design) -> list[str]:
    """Each arm as it ran (``design.arm_settings``: rows of :func:`kit.analysis.design_table.arm_settings`).

    An interleaved model, effort or binary-vs-binary comparison differs here and nowhere else in the report;
    a batch recorded before per-arm settings existed has no rows, and no table. Columns are put back in the
    design table's order, since design.json stores each row's keys sorted.
    """
    rows = pd.DataFrame(design.arm_settings)
    if rows.empty:
        return []
    columns = ["batch", *ARM_COLUMNS] if "batch" in rows.columns else ARM_COLUMNS
    return ["Each arm as it ran:", "", md_table(rows.reindex(columns=columns)), ""]


def _beyond_runs(arms: pd.DataFrame | None) -> set[str]:
    """The arms whose total-token interval (arms.csv) reached past what their runs can produce."""
    if arms is None or arms.empty or "bound_beyond_data" not in arms.columns:
        return set()
    rows = arms[(arms["metric"] == "total_tokens") & arms["bound_beyond_data"].map(truthy)]
    return set(rows["arm"].astype(str))


def _headline_table(
    headline: pd.DataFrame, unable: Iterable[str] = (), arms: pd.DataFrame | None = None
) -> pd.DataFrame:
    """headline.csv with human headers and one cell per interval (its raw columns are for code, not readers); an arm
    that could not do the task flagged so, and a per-arm interval that reached past the arm's runs (arms.csv's
    ``bound_beyond_data``: an upper bound above the largest run is the model's, not the data's)."""
    unable, beyond = set(unable), _beyond_runs(arms)
    prefix = "total_tokens_" if "total_tokens_mean" in headline.columns else ""
    ratio_col = next((c for c in ("ratio", "ratio_vs_baseline") if c in headline.columns), None)
    rows = []
    for _, r in headline.iterrows():
        label = r.get("label")
        flags = [str(label) if isinstance(label, str) else "", "cannot do the task" if r["arm"] in unable else ""]
        flags += ["CI reaches past the runs (arms.csv note)"] if str(r["arm"]) in beyond else []
        rows.append(
            {
                "arm": r["arm"],
                "n": r.get("n"),
                "failed": r.get("failed"),
                "total tokens (mean)": _num(r.get(f"{prefix}mean")),
                "total tokens, 95% CI": interval(r.get(f"{prefix}lower"), r.get(f"{prefix}upper")),
                "ratio arm / baseline": _num(r.get(ratio_col)) if ratio_col else math.nan,
                "ratio, 95% CI": interval(r.get("ratio_lower"), r.get("ratio_upper")),
                "flag": "; ".join(f for f in flags if f),
            }
        )
    return pd.DataFrame(rows)


def _ratios_table(ratios: pd.DataFrame, controls: Iterable[str] = ()) -> pd.DataFrame:
    """Every comparison row, readable: grades are differences of means, everything else ratios; a control's rows
    flagged as the control's."""
    controls = set(controls)
    rows = []
    for _, r in ratios.iterrows():
        small = _num(r.get("small_n")) == 1
        control = str(r["arm"]) in controls or str(r["baseline"]) in controls
        flags = [f for f, on in ((STITCH, str(r.get("label") or "") == STITCH), ("n<5", small)) if on]
        flags += (
            ["capped at the runs' range: a bound no resample can pass"] if truthy(r.get("bound_beyond_data")) else []
        )
        rests = r.get("interval_rests_on")
        flags += [f"rests on {rests}'s runs"] if isinstance(rests, str) and rests else []
        flags += ["control: contamination, not a treatment"] if control else []
        rows.append(
            {
                "comparison": r.get("comparison", f"{r['arm']} vs {r['baseline']}"),
                "metric": METRIC_LABELS.get(r["metric"], r["metric"]),
                "kind": "difference" if r["metric"] == "grade" else "ratio arm / baseline",
                "estimate": _num(r["estimate"]),
                "95% CI": interval(r["lower"], r["upper"]),
                "n (arm / baseline)": f"{_cell(r.get('n_arm'))} / {_cell(r.get('n_baseline'))}",
                "batches": r["from_batch"] if _one_batch_of_several(r) else r.get("batches"),
                "hit rates (arm / baseline)": f"{_pct(r.get('hit_rate_arm'))} / {_pct(r.get('hit_rate_baseline'))}"
                if r["metric"] == "uncached_input_tokens"
                else "",
                "flags": ", ".join(flags),
                "study coverage": _share(r.get("study_coverage")),
                "family (Holm)": _holm_cell(r),
                "method": r.get("method", ""),
            }
        )
    return pd.DataFrame(rows)


def _holm_cell(row: pd.Series) -> str:
    """'decisive at 97.5%' / 'not decisive at 97.5%' for a row of a family of several; '' otherwise."""
    size, level = _num(row.get("family_size")), _num(row.get("family_level"))
    if math.isnan(size) or size < 2 or math.isnan(level):
        return ""
    return f"{'decisive' if truthy(row.get('decisive')) else 'not decisive'} at {level * 100:.4g}% (of {int(size)})"


def _quality_section(
    trials: pd.DataFrame, ratios: pd.DataFrame, arms: pd.DataFrame | None, quality: pd.DataFrame | None = None
) -> list[str]:
    """Grades per arm, each grade difference, and the non-inferiority gate the headline states (quality.csv)."""
    out = ["## Quality parity", ""]
    summary = grade_summary(trials, arms) if "arm" in trials.columns else pd.DataFrame()
    if summary.empty or summary["graded"].sum() == 0:
        out.append("No trial was graded: a cheaper arm could be a worse one, and this batch cannot tell.")
    else:
        summary = summary.assign(
            **{"95% CI": [interval(lo, hi) for lo, hi in zip(summary["lower"], summary["upper"], strict=True)]}
        ).drop(columns=["lower", "upper"])
        out.append(md_table(summary.rename(columns={"mean": "mean grade"})))
    for _, row in _metric_rows(ratios, "grade").iterrows():
        lo, hi = _num(row["lower"]), _num(row["upper"])
        ci = "no interval: no variation in grades" if math.isnan(lo) else f"95% CI {lo:+.2f} to {hi:+.2f}"
        out += ["", f"Grade difference {row['arm']} − {row['baseline']}: {_num(row['estimate']):+.2f} ({ci})."]
    if quality is not None and not quality.empty and "verdict" in quality.columns:
        out += ["", "The non-inferiority gate (docs/method.md#grading):", ""]
        out += [f"- {quality_sentence(gate)}" for _, gate in quality.iterrows()]
    return [*out, ""]


def _share(value) -> str:
    return "—" if math.isnan(_num(value)) else f"{_num(value):.1%}"


def _savings_section(savings: pd.DataFrame | None) -> list[str]:
    """The per-prompt savings table (analysis/savings.csv; docs/method.md#savings): spread across prompts, not one mean.

    Why: a mean saving can hide prompts where the arm costs more; median, min, max and stdev show it.
    """
    if savings is None or savings.empty:
        return []
    rows, notes = [], []
    for _, r in savings.iterrows():
        baseline = r.get("baseline", r.get("control"))
        comparison = f"{r['arm']} vs {baseline}"
        rows.append(
            {
                "comparison": comparison,
                "metric": METRIC_LABELS.get(r["metric"], r["metric"]) if "metric" in r else "—",
                "prompts": r.get("n"),
                "median": _share(r.get("median")),
                "mean": _share(r.get("mean")),
                "mean, 95% CI": "—"
                if math.isnan(_num(r.get("lower")))
                else f"{_share(r['lower'])} to {_share(r['upper'])}",
                "min": _share(r.get("min")),
                "max": _share(r.get("max")),
                "stdev": _share(r.get("stdev")),
            }
        )
        if isinstance(r.get("note"), str) and r["note"]:
            notes.append(f"- {comparison}: {r['note']}")
    intro = (
        "Saving per prompt = 1 − arm / baseline, one prompt per run index, summarised across prompts "
        "(docs/method.md#savings); a negative saving means the arm cost more on that prompt."
    )
    return ["## Per-prompt savings", "", intro, "", md_table(pd.DataFrame(rows)), *(["", *notes] if notes else []), ""]


CODE_MODE_INTRO = (
    "Codex ran with Code Mode (`backend_options: {code_mode: true}`, i.e. `features.code_mode=true`): reads are "
    "`tools.*(…)` calls inside `exec` cells, so batching shows as calls per cell, not calls per response. Calls "
    "per cell is each trial's `exec_tool_calls / exec_cells`, averaged over the arm's ok trials. A cell's outputs "
    "share Codex's single per-output context budget, so reads cut from a full cell are read again."
)
_CODE_MODE_SUMS = {
    "cells with ≥ 2 calls": "exec_multi_call_cells",
    "cells with Promise.all": "exec_promise_all_cells",
    "plain function calls": "function_calls",
}


def _counts(trials: pd.DataFrame, column: str) -> pd.Series:
    return pd.to_numeric(trials[column], errors="coerce").astype(float)


def _code_mode_row(arm: str, trials: pd.DataFrame) -> dict:
    """One arm's cells: per-trial means, and sums of the cell kinds (sums stay missing when unknown, never 0)."""
    cells = _counts(trials, "exec_cells")
    per_cell = (_counts(trials, "exec_tool_calls") / cells).where(cells > 0)
    sums = {label: _counts(trials, column).sum(min_count=1) for label, column in _CODE_MODE_SUMS.items()}
    return {
        "arm": arm,
        "trials": len(trials),
        "exec cells per trial": cells.mean(),
        "tools.* calls per cell": per_cell.mean(),
        **sums,
    }


def code_mode_section(trials: pd.DataFrame, design: Design) -> list[str]:
    """How each arm batched its reads when Codex ran Code Mode cells; nothing when no ok trial ran one.

    Why a section: under Code Mode the response-level call counts miss batching (several ``tools.*`` calls sit
    in one ``exec`` cell), so the mechanism behind fewer cycles is only visible per cell.
    """
    ok = stats.finished(trials)
    if "exec_cells" not in ok.columns or not _counts(ok, "exec_cells").gt(0).any():
        return []
    rows = [_code_mode_row(arm, group) for arm, group in ok.groupby(ok["arm"].astype(str), sort=True)]
    out = ["## Code Mode cells (Codex)", "", CODE_MODE_INTRO, ""]
    if design.simulated:
        out += ["These cells were written by the kit's scripted model on the embedded provider: a simulation.", ""]
    out += [md_table(pd.DataFrame(rows)), ""]
    return out + ([quota, ""] if (quota := quota_line(ok)) else [])


def _in_run_order(trials: pd.DataFrame) -> pd.DataFrame:
    """Trials in the order they ran: by start time across batches, else by schedule position."""
    key = next((c for c in ("started_at", "order_index") if c in trials.columns), None)
    return trials.sort_values(key, kind="stable") if key else trials


def quota_line(trials: pd.DataFrame) -> str:
    """'Codex quota used: first → last per arm …' from the trials' quota columns; '' where none was reported.

    A coarse cross-check on the token counts, not a measurement: interleaved arms draw on one plan quota, and the
    windows report whole percents of an allowance the kit does not know.
    """
    ordered = _in_run_order(trials)
    windows = []
    for window in QUOTA:
        first, last = f"{window}_first", f"{window}_last"
        if not {first, last} <= set(ordered.columns):
            continue
        arms = []
        for arm, group in ordered.groupby(ordered["arm"].astype(str), sort=True):
            start, end = _counts(group, first).dropna(), _counts(group, last).dropna()
            if len(start) and len(end):
                arms.append(f"{arm} {start.iloc[0]:g}% → {end.iloc[-1]:g}%")
        if arms:
            windows.append(f"{window.removeprefix('quota_').removesuffix('_used')} window {', '.join(arms)}")
    if not windows:
        return ""
    return (
        f"Codex quota used: first → last per arm (percent of the plan's window at the arm's first and last "
        f"response; a coarse cross-check, since interleaved arms draw on one quota): {'; '.join(windows)}."
    )


def _occupancy_section(batch_dir: Path) -> list[str]:
    """Residual context occupancy as docs/method.md#occupancy prints it: each arm's block, the explore residual
    against file access with its interval, and the fixed overhead; nothing when the batch compares no explore
    tool (``analysis/occupancy_comparison.csv`` without a row), where per-answer cost is the question."""
    bd = BatchDir(Path(batch_dir))
    compared = bd.analysis_csv("occupancy_comparison")
    if not compared.is_file() or pd.read_csv(compared).empty:
        return []
    text = occupancy_block.for_batch(bd.analysis)
    return ["## Residual context occupancy", "", "```", text, "```", ""]


def _dedupe(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(i for i in items if i))


def _figure_lines(batch_dir: Path, figures: dict[str, Path]) -> list[str]:
    out = ["## Figures", ""]
    for name, path in figures.items():
        path = Path(path)
        full = path if path.is_absolute() else batch_dir / path
        if not full.is_file():
            raise FileNotFoundError(f"figure {name!r}: {full} does not exist (save it before writing the report)")
        rel = Path(os.path.relpath(full.resolve(), batch_dir.resolve())).as_posix()
        out += [f"### {name}", "", f"![{name}]({rel})", ""]
    return out


# ---------------------------------------------------------------- the report


def _headline_lines(
    headline: pd.DataFrame, ratios: pd.DataFrame, trials: pd.DataFrame, design: Design, quality: pd.DataFrame | None
) -> list[str]:
    """The report's opening: the total-token sentences, the runs they need and the uncached sentences apart; when an
    arm could not do the task, that instead, in its first lines, and no efficiency claim at all."""
    if unable := unable_sentences(design):
        return [f"**{s}**" for s in unable] + [""]
    totals = total_sentences(ratios, design, headline, quality) or [
        "No total-token comparison between arms is available."
    ]
    lines = [f"**{s}**" for s in totals] + [""]
    lines += [" ".join(needed), ""] if (needed := _runs_needed_sentences(ratios, trials, design)) else []
    uncached = uncached_sentences(ratios, design)
    return lines + ([" ".join(uncached), ""] if uncached else [])


def write_report(
    batch_dir: Path,
    *,
    design: Design,
    headline: pd.DataFrame,
    ratios: pd.DataFrame,
    trials: pd.DataFrame,
    figures: dict[str, Path],
    warnings: list[str],
    arms: pd.DataFrame | None = None,
    savings: pd.DataFrame | None = None,
    quality: pd.DataFrame | None = None,
) -> Path:
    """Write ``report.md`` and ``report.html`` into ``batch_dir``; returns the markdown path.

    Figure paths may be absolute or relative to ``batch_dir``; they are embedded relative, so the folder
    can move as a whole. A figure that does not exist raises rather than leaving a broken image.
    ``arms`` (analysis/arms.csv) supplies the per-arm intervals, so the report quotes the table's own;
    ``savings`` (analysis/savings.csv) adds the per-prompt savings section when the batch has one; trials that
    ran Codex Code Mode cells add the Code Mode section.
    """
    batch_dir = Path(batch_dir)
    batch_dir.mkdir(parents=True, exist_ok=True)
    batch = design.batch
    batch_text = ", ".join(batch) if isinstance(batch, list) else batch
    lines: list[str] = []
    if design.simulated:
        lines += [SIMULATION_BANNER, ""]
    lines += [f"# Token-cost report: {batch_text}", ""]
    lines += _headline_lines(headline, ratios, trials, design, quality)
    all_warnings = _dedupe([*warnings, *derived_warnings(ratios, trials, design)])
    lines += ["## Warnings", ""] + ([f"- {w}" for w in all_warnings] or ["- none"]) + [""]
    lines += ["## Design", "", _design_table(design), "", *_arm_settings_lines(design)]
    lines += batches_section(trials, ratios, design)
    unable = {u.arm for u in design.unable}
    lines += ["## Per arm (total tokens)", "", md_table(_headline_table(headline, unable, arms)), ""]
    lines += cache_section(design, trials)
    lines += code_mode_section(trials, design)
    lines += _savings_section(savings)
    lines += _quality_section(trials, ratios, arms, quality)
    lines += _occupancy_section(batch_dir)
    lines += [
        "## All comparisons",
        "",
        md_table(_ratios_table(ratios, design.control_arms)) if not ratios.empty else "_(no rows)_",
        "",
    ]
    lines += _figure_lines(batch_dir, figures)
    markdown = "\n".join(lines).rstrip() + "\n"
    md_path = BatchDir(batch_dir).report_md
    write_text(md_path, markdown)
    write_text(BatchDir(batch_dir).report_html, html_page(markdown, f"Token-cost report: {batch_text}"))
    return md_path


_RENDER = mistune.create_markdown(escape=True, plugins=["table"])
_CELL = re.compile(r"<td>([^<]*)</td>")
_NUMBER = r"[+\-−]?[\d.,]+%?"
_INTERVAL = re.compile(rf"{_NUMBER}(?:–| to ){_NUMBER}")


def _classed_cell(match: re.Match) -> str:
    """A table cell, classed when it holds an interval or a number: those stay on one line (a wrapped
    "1.45–" / "76.63" misreads), while text cells may wrap."""
    text = match.group(1)
    kind = "interval" if _INTERVAL.fullmatch(text.strip()) else "number" if re.fullmatch(_NUMBER, text.strip()) else ""
    return f'<td class="{kind}">{text}</td>' if kind else match.group(0)


def html_page(markdown: str, title: str) -> str:
    """Markdown -> a standalone HTML page (raw HTML in arm names is escaped, not rendered): the batch report's
    and the history's (``kit.history.report``)."""
    body = _RENDER(markdown)
    assert isinstance(body, str)  # _RENDER renders HTML (mistune gives a list of tokens only without a renderer)
    body = body.replace("<p>SIMULATION:", '<p class="banner">SIMULATION:', 1)
    body = body.replace("<table>", '<div class="table-wrap"><table>').replace("</table>", "</table></div>")
    body = _CELL.sub(_classed_cell, body)
    return (
        f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{_CSS}</style></head>\n<body>\n{body}</body></html>\n"
    )
