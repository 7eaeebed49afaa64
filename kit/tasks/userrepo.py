"""Pointing a task pack at the user's own repository instead of its generated fixture (``run-real``).

A pack given ``repo: PATH`` (and optionally ``globs``) copies the matching files into each arm's
working folder; the agents only ever see that copy, so the user's repository is never written, moved
or re-timestamped (it is only read). An arm's instruction goes where ``PLACEMENT`` puts it (the
developer instructions: ``-c developer_instructions=…`` on Codex, ``--append-system-prompt`` on Claude
Code), never into an AGENTS.md / CLAUDE.md of the working copy: those are the repository's own, which
both arms read as its users do. Without generated ground truth a trial's answer cannot be graded:
``NO_TRUTH`` says so instead of scoring it.
"""

from __future__ import annotations

import glob
import hashlib
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kit.experiment.design import ParamError, Placement
from kit.jsontypes import PackFacts
from kit.tasks.base import Grade

NO_TRUTH = Grade(None, "no ground truth for a user repository")
PLACEMENT: Placement = "developer_instructions"  # an arm's instruction on a user repository (module docstring)
DEFAULT_GLOBS = ("**/*",)
MAX_FILES = 20_000


@dataclass(frozen=True)
class UserRepo:
    """A read-only view of the files of ``root`` that match ``globs`` (hidden folders such as .git skipped)."""

    root: Path
    globs: tuple[str, ...] = DEFAULT_GLOBS

    @classmethod
    def of(cls, repo: str | Path, globs: Sequence[str] | str | None = None) -> UserRepo:
        """Check the ``repo``/``globs`` task options; a wrong one raises a ParamError naming it."""
        root = Path(repo).expanduser()
        if not root.is_dir():
            raise ParamError("task_options.repo", f"{str(repo)!r} is not a directory", "a path to a repository")
        if isinstance(globs, str):
            globs = (globs,)
        globs = tuple(globs or DEFAULT_GLOBS)
        bad = [g for g in globs if not isinstance(g, str) or not g or Path(g).is_absolute() or ".." in Path(g).parts]
        if bad:
            raise ParamError("task_options.globs", f"bad patterns {bad}", "relative glob patterns like 'src/**/*.py'")
        found = cls(root.resolve(), globs)
        if not found.files():
            raise ParamError("task_options.globs", f"no file of {str(root)!r} matches {list(globs)}", "matching globs")
        return found

    def files(self) -> list[str]:
        """Repository-relative paths of the matching regular files that resolve inside the repository."""
        out: set[str] = set()
        for pattern in self.globs:
            for found in glob.iglob(pattern, root_dir=self.root, recursive=True):  # skips hidden names
                rel, path = Path(found), self.root / found
                if path.is_file() and path.resolve().is_relative_to(self.root):
                    out.add(rel.as_posix())
                if len(out) > MAX_FILES:
                    raise ParamError("task_options.globs", f"more than {MAX_FILES} files match", "narrower globs")
        return sorted(out)

    def copy_into(self, workdir: Path) -> list[str]:
        """Copy the matching files into ``workdir`` (contents only: no modes or times); returns their paths."""
        files = self.files()
        for rel in files:
            target = workdir / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self.root / rel, target)
        return files

    def describe(self) -> PackFacts:
        """For the manifest: where, which patterns, how many files and a digest of their contents."""
        digest = hashlib.sha256()
        files = self.files()
        for rel in files:
            digest.update(rel.encode() + b"\0" + (self.root / rel).read_bytes() + b"\0")
        return {
            "repo": str(self.root),
            "globs": list(self.globs),
            "files": len(files),
            "repo_sha256": digest.hexdigest(),
        }


def optional(repo: str | Path | None, globs: Sequence[str] | str | None) -> UserRepo | None:
    """``UserRepo.of`` when a pack was given ``repo``; ``globs`` without ``repo`` is a mistake worth naming."""
    if repo is None:
        if globs:
            raise ParamError("task_options.globs", "globs given without repo", "globs only together with repo: PATH")
        return None
    return UserRepo.of(repo, globs)
