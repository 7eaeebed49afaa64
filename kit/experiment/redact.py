"""Secrets never reach outputs: redaction for manifests, metas, logs and command lines.

Anything in the environment whose name looks like a credential is a secret; its *value* is
scrubbed from every string we write, and key-like tokens (``sk-…``) are scrubbed by shape too,
so a key passed on a command line or echoed by a CLI is caught even when it is not in the env.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

# Names of credentials (OPENAI_API_KEY, GITHUB_TOKEN, x-api-key, authorization …), not of token counts
# (input_tokens) or cache routing keys (prompt_cache_key), which are data and must stay readable.
SECRET_NAME = re.compile(
    r"^(?!.*cache_key$).*(api[_-]?key|(^|[_-])key$|(^|[_-])token$|secret|password|credential|^authorization$)",
    re.IGNORECASE,
)
KEY_SHAPE = re.compile(r"\b(sk-(?:proj-|ant-(?:api\d\d-)?)?[A-Za-z0-9_\-]{16,})")
MASK = "[REDACTED]"


def _secret_values(env: Mapping[str, str] | None = None) -> list[str]:
    """Values of credential-named variables (longest first, so overlaps redact fully)."""
    source = os.environ if env is None else env
    values = {v for k, v in source.items() if SECRET_NAME.search(k) and v and len(v) >= 6}
    return sorted(values, key=len, reverse=True)


def redact_text(text: str, secrets: list[str] | None = None) -> str:
    for value in _secret_values() if secrets is None else secrets:
        text = text.replace(value, MASK)
    return KEY_SHAPE.sub(MASK, text)


def redact(obj: Any, secrets: list[str] | None = None) -> Any:
    """A copy of ``obj`` (JSON-like) with secret values and key-shaped strings masked."""
    secrets = _secret_values() if secrets is None else secrets
    if isinstance(obj, str):
        return redact_text(obj, secrets)
    if isinstance(obj, dict):
        return {
            k: (MASK if SECRET_NAME.search(str(k)) and isinstance(v, str) else redact(v, secrets))
            for k, v in obj.items()
        }
    if isinstance(obj, list | tuple):
        return [redact(v, secrets) for v in obj]
    return obj
