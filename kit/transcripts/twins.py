"""Files that hold the same run as another file: one run captured twice (docs/method.md#transcripts).

A ``claude -p`` stream-json capture and the session file Claude Code wrote for the same run share no id the
readers can match across formats, and a backed-up rollout is a second file of the same responses: each file
is counted. ``twins`` finds them from the rows alone, so that a history's report and ``kit parse`` can name
them and the user can read one of each.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Twin:
    """A file whose responses another file holds too: the same usage, response by response (``twins``)."""

    path: str
    format: str
    same_as: str
    same_as_format: str
    responses: int


TWIN_MIN = 2  # responses alike before two files count as one run's twins: one alike response is a coincidence


def twins(req: pd.DataFrame) -> list[Twin]:
    """Files holding the same run as an earlier file: at least ``TWIN_MIN`` responses and, in order, the same
    input, cache-read and cache-write counts in each (output may differ: a stream-json capture keeps the final
    count where a session file keeps a streamed snapshot). Such files are one run captured twice (a stream-json
    capture beside its session file, a backed-up rollout), which no id ties together across formats; each is
    counted, so ``kit history``'s report and ``kit parse`` name them and the user reads one
    (docs/method.md#transcripts)."""
    if req.empty:
        return []
    codes, paths = pd.factorize(req["source_path"], sort=False, use_na_sentinel=False)  # files in their order
    order = np.argsort(codes, kind="stable")  # each file's rows together, in their order
    columns = ["input_tokens", "cache_read_tokens", "cache_write_tokens"]
    usage = req[columns].to_numpy(dtype="float64", na_value=np.nan)[order]
    counts = np.bincount(codes, minlength=len(paths))
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    formats = req["source_format"].astype("string").to_numpy(dtype=object)[order[starts]]
    first: dict[bytes, tuple[str, str]] = {}
    found = []
    for path, fmt, start, n in zip(paths, formats, starts, counts, strict=True):
        if n < TWIN_MIN:
            continue
        key = usage[start : start + n].tobytes()
        if key in first:
            found.append(Twin(str(path), str(fmt), *first[key], int(n)))
        else:
            first[key] = (str(path), str(fmt))
    return found
