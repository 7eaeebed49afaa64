"""Re-analyse a published three-arm snapshot: ``results.json`` with metadata, prompts and arms -> outputs.

caveman's ``evals/`` (docs/method.md#controls and #sources) commits the raw model outputs of three arms
per prompt, so anyone can recount them. :func:`snapshot_table` recomputes its ``measure.py`` table
exactly: output tokens counted with tiktoken ``o200k_base``, per-prompt savings ``1 - skill/terse``,
and over the prompts the median, mean, min, max and sample stdev, plus token totals; rows sorted by
median, descending (docs/method.md#savings). It then adds what the original lacks: a t-interval on
the mean saving over prompts (:func:`kit.stats.per_prompt_savings`, docs/method.md#intervals).
:func:`snapshot_markdown` prints it the way the original does (``+NN%``, Unicode minus for a negative
saving, stdev plain).

One deliberate difference: a prompt whose control output is empty has no saving, so it is left out
with a note (:func:`kit.stats.per_prompt_savings`); ``measure.py`` counts it as a saving of 0.

:func:`snapshot_to_trials` turns the snapshot into the kit's trials table (one trial per prompt and
arm, ``run`` = prompt index), so :func:`kit.stats.ratio` applies too. A snapshot stores text only, no
usage: ``output_tokens`` is the counted text, ``total_tokens`` repeats it (output only), and input and
cache columns are missing, never zero.

``python -m kit snapshot PATH`` (``kit.cli.snapshot``) prints that table for any such file.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from kit import stats
from kit.analysis import metrics
from kit.errors import KitError
from kit.experiment import design
from kit.schema import TOKENS
from kit.tokens import count

EXPORTED = "agent-ab-kit batch"  # metadata.source of a snapshot exported from a batch (kit.analysis.snapshot_export)
BASELINE = "__baseline__"
TERSE = "__terse__"
LABELS = {BASELINE: "baseline", TERSE: "terse"}
_TABLE_COLUMNS = [
    "skill", "n", "median", "mean", "min", "max", "stdev", "lower", "upper", "confidence", "method",
    "tokens_skill", "tokens_control", "note",
]  # fmt: skip


class SnapshotError(KitError, ValueError):
    """A snapshot file is malformed; the message names the file and the place in it."""


@dataclass(frozen=True)
class Snapshot:
    """A three-arm snapshot: outputs of every arm, aligned with ``prompts``."""

    metadata: dict[str, Any]
    prompts: tuple[str, ...]
    arms: dict[str, tuple[str, ...]]
    source: str = "<snapshot>"

    @property
    def skills(self) -> list[str]:
        """Arms under test, in file order: every arm except the reference arms (``__name__``)."""
        return [a for a in self.arms if not _is_reference(a)]


def _is_reference(arm: str) -> bool:
    return arm.startswith("__") and arm.endswith("__") and len(arm) > 4


def load_snapshot(path: str | Path) -> Snapshot:
    """Read and validate ``results.json``; errors name the file and the JSON location."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SnapshotError(f"{path}: cannot read the snapshot ({exc})") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SnapshotError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON ({exc.msg})") from exc
    return parse_snapshot(data, str(path))


def parse_snapshot(data: Any, source: str = "<snapshot>") -> Snapshot:
    """Validate an already-decoded snapshot (``load_snapshot`` without the file)."""

    def fail(where: str, problem: str) -> SnapshotError:
        return SnapshotError(f"{source}: {where}: {problem}")

    if not isinstance(data, dict):
        raise fail("$", f"expected an object with keys metadata, prompts, arms; got {type(data).__name__}")
    metadata = data.get("metadata", {})
    if not isinstance(metadata, dict):
        raise fail("$.metadata", f"expected an object; got {type(metadata).__name__}")
    prompts = data.get("prompts")
    if not isinstance(prompts, list) or not prompts:
        raise fail("$.prompts", "expected a non-empty list of prompt strings")
    for i, p in enumerate(prompts):
        if not isinstance(p, str):
            raise fail(f"$.prompts[{i}]", f"expected a string; got {type(p).__name__}")
    declared = metadata.get("n_prompts")
    if declared is not None and declared != len(prompts):
        raise fail("$.metadata.n_prompts", f"says {declared!r} but $.prompts has {len(prompts)}")
    arms = data.get("arms")
    if not isinstance(arms, dict) or not arms:
        raise fail("$.arms", "expected a non-empty object: arm name -> list of outputs")
    for name, outputs in arms.items():
        if not isinstance(outputs, list):
            raise fail(f"$.arms.{name}", f"expected a list of output strings; got {type(outputs).__name__}")
        if len(outputs) != len(prompts):
            raise fail(f"$.arms.{name}", f"has {len(outputs)} outputs; $.prompts has {len(prompts)}")
        for i, out in enumerate(outputs):
            if not isinstance(out, str):
                raise fail(f"$.arms.{name}[{i}]", f"expected an output string; got {type(out).__name__}")
    return Snapshot(dict(metadata), tuple(prompts), {k: tuple(v) for k, v in arms.items()}, source)


def _token_counts(snapshot: Snapshot, encoding: str = "o200k_base") -> pd.DataFrame:
    """Output tokens per prompt (rows, by index) and arm (columns, file order)."""
    return pd.DataFrame({arm: [count(text, encoding) for text in outs] for arm, outs in snapshot.arms.items()})


def snapshot_table(
    snapshot: Snapshot,
    encoding: str = "o200k_base",
    control: str = TERSE,
    confidence: float = 0.95,
) -> pd.DataFrame:
    """One row per skill: savings over ``control`` across prompts, token totals and a confidence interval.

    Columns: skill, n, median, mean, min, max, stdev (fractions, ``1 - skill/control`` per prompt),
    lower, upper (the interval on the mean), confidence, method, tokens_skill, tokens_control (totals over
    every prompt, as ``measure.py`` sums them) and note. ``attrs`` carries what the header needs:
    metadata, encoding, control, the reference arms' totals, the per-prompt counts and the source.
    """
    if control not in snapshot.arms:
        raise SnapshotError(f"{snapshot.source}: control arm {control!r} not in $.arms; have {list(snapshot.arms)}")
    counts = _token_counts(snapshot, encoding)
    rows = []
    for skill in snapshot.skills:
        if skill == control:
            continue
        values = pd.DataFrame(
            {
                "prompt": [*counts.index, *counts.index],
                "arm": [skill] * len(counts) + [control] * len(counts),
                "value": [*counts[skill], *counts[control]],
            }
        )
        s = stats.per_prompt_savings(values, skill, control, confidence=confidence)
        rows.append(
            {
                "skill": skill,
                "n": s.n,
                **{k: getattr(s, k) for k in ("median", "mean", "min", "max", "stdev", "lower", "upper", "confidence")},
                "method": f"{s.method} over prompts" if s.method else "",
                "tokens_skill": int(counts[skill].sum()),
                "tokens_control": int(counts[control].sum()),
                "note": s.note,
            }
        )
    table = pd.DataFrame(rows, columns=_TABLE_COLUMNS)
    table = table.sort_values("median", ascending=False, kind="stable").reset_index(drop=True)
    table.attrs.update(
        {
            "metadata": dict(snapshot.metadata),
            "encoding": encoding,
            "control": control,
            "n_prompts": len(snapshot.prompts),
            "reference_totals": {a: int(counts[a].sum()) for a in snapshot.arms if _is_reference(a)},
            "per_prompt_tokens": {a: [int(v) for v in counts[a]] for a in counts.columns},
            "confidence": confidence,
            "source": snapshot.source,
        }
    )
    return table


def fmt_pct(x: float) -> str:
    """A saving as ``measure.py`` prints it: ``+NN%``, or ``−NN%`` (Unicode minus) when the arm is longer."""
    if not math.isfinite(x):
        return "n/a"
    sign = "−" if x < 0 else "+"
    return f"{sign}{abs(x) * 100:.0f}%"


def _fmt_sd(x: float) -> str:
    return f"{x * 100:.0f}%" if math.isfinite(x) else "n/a"


def _exported_lines(meta: dict[str, Any]) -> list[str]:
    """What a snapshot the kit exported from a batch (``kit.analysis.snapshot_export``) says before caveman's
    header: a simulation as one, and that the recount is of the final answers' text only."""
    if meta.get("source") != EXPORTED:
        return []
    simulated = "SIMULATED: a scripted model on the embedded provider, not a real model's cost. " * bool(
        meta.get("simulated")
    )
    return [
        f"_{simulated}Exported from batch {meta.get('batch')} (task {meta.get('task')}, backend "
        f"{meta.get('backend')} {meta.get('backend_version') or ''}, kit {meta.get('kit_commit')})._",
        "_Recounted below: the final answers' text only; the batch's own token counts (input, cache, total) "
        "are in the file's `trials` and the batch's report._",
    ]


def snapshot_markdown(table: pd.DataFrame) -> str:
    """The original ``measure.py`` report for this table, with a column for the confidence interval added."""
    a = table.attrs
    meta, control = a.get("metadata", {}), a.get("control", TERSE)
    totals = a.get("reference_totals", {})
    label = LABELS.get(control, control)
    ci = f"Mean {a.get('confidence', 0.95):.0%} CI"
    lines = [
        *_exported_lines(meta),
        f"_Generated: {meta.get('generated_at', '?')}_",
        f"_Model: {meta.get('model', '?')} · CLI: {meta.get('claude_cli_version', '?')}_",
        f"_Tokenizer: tiktoken {a.get('encoding', 'o200k_base')} (approximation of Claude's BPE)_",
        f"_n = {meta.get('n_prompts', a.get('n_prompts', '?'))} prompts, single run per arm_",
        "",
        "**Reference arms (no skill):**",
    ]
    if BASELINE in totals:
        lines.append(f"- baseline (no system prompt): {totals[BASELINE]} tokens total")
    if TERSE in totals:
        vs = f" ({fmt_pct(1 - totals[TERSE] / totals[BASELINE])} vs baseline)" if totals.get(BASELINE) else ""
        prefix = meta.get("terse_prefix", "Answer concisely.")
        lines.append(f"- terse control (`{prefix}`): {totals[TERSE]} tokens total{vs}")
    lines += [
        "",
        f"| Skill | Median | Mean | Min | Max | Stdev | Tokens (skill / {label}) | {ci} |",
        "|-------|--------|------|-----|-----|-------|-------------------------|" + "-" * (len(ci) + 2) + "|",
    ]
    for r in table.itertuples(index=False):
        lines.append(
            f"| **{r.skill}** | {fmt_pct(r.median)} | {fmt_pct(r.mean)} | {fmt_pct(r.min)} | {fmt_pct(r.max)} | "
            f"{_fmt_sd(r.stdev)} | {r.tokens_skill} / {r.tokens_control} | [{fmt_pct(r.lower)}, {fmt_pct(r.upper)}] |"
        )
    method = next((m for m in table["method"] if m), "t-interval over prompts")
    lines += [
        "",
        f"_Savings = 1 - skill_tokens / {label}_tokens per prompt._",
        f"_{ci}: {method}; one run per (prompt, arm), so run-to-run variance is not in it._",
    ]
    notes = [f"{r.skill}: {r.note}" for r in table.itertuples(index=False) if r.note]
    lines += [f"_Note: {n}_" for n in notes]
    return "\n".join(lines) + "\n"


def snapshot_to_trials(snapshot: Snapshot, encoding: str = "o200k_base", batch: str | None = None) -> pd.DataFrame:
    """The snapshot as a trials table: one finished trial per (prompt, arm), ``run`` = prompt index.

    Every arm of a snapshot came from one generation run, so all trials share one ``batch`` (default:
    the file's stem). ``total_tokens`` is output tokens only, since a snapshot has no usage; input and
    cache columns are missing (``usage_known`` false), and ``order_index`` is missing because the
    snapshot does not record the order (caveman's runner went arm by arm: a blocked schedule).
    """
    name = batch or (Path(snapshot.source).stem if snapshot.source != "<snapshot>" else "snapshot")
    counts = _token_counts(snapshot, encoding)
    rows = []
    for arm in snapshot.arms:
        for run, tokens in enumerate(counts[arm]):
            rows.append(
                {
                    "batch": name,
                    "arm": arm,
                    "run": run,
                    # in a frame only, never a folder: a snapshot's arms are its file's keys (``__baseline__``)
                    "trial_id": design.TRIAL_ID.format(run=run, arm=arm),
                    "status": "ok",
                    "reason": "",
                    "grade_detail": "",
                    "backend": "snapshot",
                    "model": snapshot.metadata.get("model"),
                    "control": False,
                    "simulated": False,
                    "output_tokens": int(tokens),
                    "total_tokens": int(tokens),
                    "cycles": 1,
                    "tool_calls": 0,
                    "usage_known": False,
                }
            )
    frame = pd.DataFrame(rows).reindex(columns=[*metrics.META_COLUMNS, *metrics.TRIAL_COLUMNS])
    dtypes = {c: "Int64" for c in [*TOKENS, "cycles", "tool_calls", "run", "order_index"]}
    dtypes |= {c: "Float64" for c in ("grade", "wall_s", "hit_rate", "calls_per_response", "multi_call_share")}
    dtypes |= {c: "string" for c in ("batch", "arm", "trial_id", "status", "reason", "grade_detail", "backend")}
    dtypes |= {c: "string" for c in ("model", "isolation", "started_at")}
    dtypes |= {"control": "boolean", "simulated": "boolean", "usage_known": "boolean"}
    frame = frame.astype(dtypes)
    frame.attrs["note"] = "snapshot: total_tokens = output tokens of the stored text; no usage was recorded"
    return frame
