"""Design facts the report states that the run stage records: each arm's settings, and the shared-prefix label.

Why here and not in the report: the run stage writes these facts (``manifest.json``'s ``arm_settings``) and the
analyze stage measures the shared prefix (``design.json``'s ``shared_first_prefix_tokens``); these functions turn
them into what a reader sees, so the report calls one function each.
"""

from __future__ import annotations

import pandas as pd

from kit.provider.cache import load_profile
from kit.records import Design, Manifest

ARM_COLUMNS = ["arm", "model", "effort", "binary", "version"]


def arm_settings(manifests: list[Manifest]) -> pd.DataFrame:
    """One row per (batch, arm) as it ran: model, effort, binary (CLI path, or the SDK package) and version.

    An interleaved model, effort or binary-vs-binary comparison differs here and nowhere else, so the design table
    must show it. Batches recorded before per-arm settings existed give no rows.
    """
    rows = [
        {"batch": m.batch, "arm": arm, **{k: settings.get(k) for k in ARM_COLUMNS[1:]}}
        for m in manifests
        for arm, settings in m.arm_settings.items()
    ]
    table = pd.DataFrame(rows, columns=["batch", *ARM_COLUMNS])
    return table if table["batch"].nunique() > 1 else table.drop(columns="batch")


def shared_prefix_label(design: Design) -> str | None:
    """The sentence that labels uncached ratios diagnostic when every isolated trial's first request shares a
    cacheable head (docs/method.md#isolation), else None. The analyze stage measures the head without the control's
    trials (``kit.stages.analyze.shared_first_prefix``): a control runs without isolation by design.

    A CLI keeps a hidden prefix ahead of anything the kit can vary (measured: about 1,256 tokens on Codex, 6,913 on
    Claude Code), so one trial's first request may read what another wrote; an uncached ratio then measures the
    arms plus that sharing. The threshold is the shortest cacheable prompt of the batch's profile and model: a
    shorter shared head can never be read from the cache.
    """
    shared = design.shared_first_prefix_tokens
    if not shared:
        return None
    profile = design.profile
    minimum = load_profile(profile).min_tokens_for(design.model) if profile else 0
    if shared < minimum:
        return None
    every = "every isolated trial's" if design.control_arms else "every trial's"  # a control is measured apart
    return (
        f"diagnostic: {every} first request shares its first {shared:,} tokens (a prefix isolation does not "
        "separate, such as a CLI's hidden system prompt and tools), so another trial's cache can serve them; the "
        "uncached ratios are diagnostic, not cost claims (docs/method.md#isolation)."
    )
