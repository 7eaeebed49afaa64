"""``python -m kit replicate -f params/X.yaml --batches 3 --control ARM``: a replication in one command.

docs/method.md#replication: a claim that depends on the cache (an uncached ratio, a cost) needs at least three
batches under fresh salts plus one non-isolated control arm, run interleaved with the others, so that the batches
show whether the ratio moves with the hit rate and the control shows what isolation removed. This command runs
``--batches`` batches ``<batch>-1`` … ``<batch>-N`` (run and parse), each with the control arm beside the design's
arms, then analyses them together into the first batch's ``analysis/`` and ``report.md`` (``kit.cli.pipeline``). The
control is ``ARM`` itself when it is defined with ``control: true``, else ``ARM_control``: ``ARM``'s definition run
without isolation. Run again, the same command resumes each batch (a batch keeps its salt).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

from kit.cli import pipeline
from kit.cli.batch import INTERRUPTED
from kit.errors import KitError
from kit.experiment.design import ParamError
from kit.experiment.layout import from_root, new_batch_id, shown
from kit.jsontypes import ParamValues
from kit.names import is_name
from kit.params import add_parameter_options

MIN_BATCHES = 2  # one batch is no replication; docs/method.md#replication asks for three
CLAIM_BATCHES = 3


@dataclasses.dataclass(frozen=True)
class Replication:
    """What the command runs: each batch's parameters (run and parse), then the joint analysis's."""

    batches: list[ParamValues]
    analysis: ParamValues
    control: str

    @property
    def folders(self) -> list[Path]:
        return [from_root(p["outputs_dir"]) / p["batch"] for p in self.batches]


def control_arm(params: ParamValues, arm: str) -> tuple[str, dict[str, Any]]:
    """The control's name and its ``arm_defs`` entry: ``arm`` as defined when it is a control already, else
    ``<arm>_control``, ``arm``'s definition (the task pack's, with the parameters' ``arm_defs`` over it) run without
    isolation. A name that is no arm of the task is refused with the arms it has."""
    from kit.stages import run  # the task packs: only once the command line is read

    arms = run.configure({**pipeline.defaults("run"), **params}).arms
    if arm not in arms:
        raise ParamError("--control", f"{arm!r} is not an arm of task {params.get('task')!r}", sorted(arms))
    base = arms[arm]
    if base.control:
        return arm, {}
    spec = {k: v for k, v in dataclasses.asdict(base).items() if k != "name"}
    spec.update(flags=list(base.flags), tools=list(base.tools), env=dict(base.env), control=True)
    return f"{arm}_control", spec


def plan(params: ParamValues, batches: int, control: str) -> Replication:
    """Every batch's parameters and the joint analysis's, checked before anything is written (``ParamError``)."""
    if batches < MIN_BATCHES:
        raise ParamError("--batches", f"got {batches}", f"an integer >= {MIN_BATCHES} ({CLAIM_BATCHES} for a claim)")
    values = {**pipeline.defaults("run"), **params}
    if values.get("isolation") == "none":
        raise ParamError("isolation", "'none' leaves no isolated arm to set the control against", "nonce … all")
    name = values.get("batch") or new_batch_id(str(values.get("task")))
    if not isinstance(name, str) or not is_name(f"{name}-{batches}"):
        raise ParamError("batch", f"{name!r} cannot name the batches {name}-1 … {name}-{batches}", "a folder name")
    arm, spec = control_arm(params, control)
    arms = [*values["arms"], *([arm] if arm not in values["arms"] else [])]
    arm_defs = {**values.get("arm_defs", {}), **({arm: spec} if spec else {})}
    salt = values.get("salt")
    runs = []
    for i in range(1, batches + 1):
        one = {**params, "batch": f"{name}-{i}", "arms": arms, "arm_defs": arm_defs}
        one["salt"] = f"{salt}-{i}" if salt else None  # a fixed salt made distinct; None: a fresh random one
        pipeline.plan(one, ("run", "parse"))
        runs.append(one)
    folders = [str(from_root(p.get("outputs_dir") or "outputs") / p["batch"]) for p in runs]
    analysis = {**runs[0], "batch_dirs": folders}
    return Replication(runs, analysis, arm)


def execute(replication: Replication, progress: bool = True) -> Path:
    """Run and parse every batch, then analyse and plot them together; the first batch's folder (the report's)."""
    for params in replication.batches:
        pipeline.execute(params, stages=("run", "parse"), progress=progress)
    return pipeline.execute(replication.analysis, stages=("analyze", "plot"), progress=progress)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m kit replicate",
        description="A replication as docs/method.md#replication prescribes: --batches batches under fresh salts, "
        "each with a non-isolated control arm interleaved, analysed together into one report (the first batch's).",
    )
    add_parameter_options(ap)
    ap.add_argument("--batches", type=int, default=CLAIM_BATCHES, help="how many batches (default 3, at least 2)")
    ap.add_argument(
        "--control",
        required=True,
        metavar="ARM",
        help="the arm whose non-isolated copy (ARM_control) is the control, or an arm defined with control: true",
    )
    args = ap.parse_args(argv)
    try:
        params = pipeline.load_params(args.file, args.yaml, [tuple(p) for p in args.pairs])
        replication = plan(params, args.batches, args.control)
        folder = execute(replication)
    except KitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(INTERRUPTED, file=sys.stderr)
        return 130
    from kit.stages import plot

    print(f"batches: {', '.join(shown(f) for f in replication.folders)} (control: {replication.control})")
    print(plot.headline_for(folder).split("\n\n", 1)[0])
    if (report := plot.report_path(folder)) is not None:
        print(f"report: {report}")
    return 0
