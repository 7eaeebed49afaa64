"""``backend_options.auth``: a CLI on the user's own login instead of an API key.

``api_key`` (the default) runs every trial on a key: the embedded provider's placeholder, or for ``endpoint:
real`` the key in ``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY``. ``login`` runs Codex on the user's ChatGPT login
and Claude Code on the user's Claude subscription login, so what only a login has is observed on the real
endpoint: Codex's plan quota (the rollouts' ``rate_limits``, the ``quota_*`` columns) and the plan's credits,
Claude Code's subscription limits. Only with ``endpoint: real``: the embedded provider knows no login, and the
option would change nothing there, so it is refused (``check``).

Where the login is read (the user's own files, as the CLI itself reads them): Codex ``$CODEX_HOME/auth.json``
(default ``~/.codex/auth.json``; a login kept in the OS keyring, ``cli_auth_credentials_store``, is not read);
Claude Code ``$CLAUDE_CONFIG_DIR/.credentials.json`` (default ``~/.claude/.credentials.json``, where Claude Code
2.1.328 keeps it on Linux and Windows; on macOS it is in the Keychain and not read).

How it reaches a trial: a copy in the trial's private home (``cli_common.trial_home``: outside the batch folder,
removed with the trial), at the path the CLI reads there, mode 0400 in a 0700 home, removed after the trial even
with ``keep_home``. A copy, not a read-only bind mount of the user's file: a bind needs a mount namespace per
CLI process, and a copy can leave out what a trial must not have. It leaves out the refresh token: refresh
tokens are single-use (Codex: "your refresh token was already used"), so a trial refreshing the login in its
throwaway home would spend the user's token and leave the user's own file stale. A trial gets the access token
alone; ``check`` refuses a login whose access token expires within ``MARGIN_S`` (or that Codex would refresh
anyway: ``last_refresh`` older than its 8 days), and a trial that outlives the token fails with the endpoint's
401 in its reason. The backends copy transcripts, never the home, so no credential byte reaches the outputs
(tests/agents/test_login.py greps the batch folder); the command lines record no key (there is none).

Codex on a login (measured on 0.169.0 against the embedded provider, a fake login): the kit's model provider
gets ``requires_openai_auth=true`` instead of an ``env_key`` and sends the login's bearer token; its base URL
has no ``/v1``, as the ChatGPT backend's paths have none (``upstream_url`` defaults to ``CHATGPT_UPSTREAM``).
A ChatGPT login also turns on two things an API key does not: ``apps`` (ChatGPT connectors, fetched from
chatgpt.com/backend-api/ps/mcp) and ``image_generation`` (an ``image_gen`` tool); both are pinned off
(``LOGIN_PINNED``), and the first request then offers the same tools and tokens as on a key (5,788 = 5,788).
Claude Code on a login: no ``ANTHROPIC_API_KEY`` (it outranks the login), the credentials file in ``$HOME``;
it sends the login's bearer token (measured on 2.1.328). Each trial's meta ``versions`` says which (``auth``).
"""

from __future__ import annotations

import base64
import calendar
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from kit.errors import InputError
from kit.experiment.design import ParamError
from kit.params import RunParams

OPTION = "auth"
API_KEY, LOGIN = "api_key", "login"
MODES = (API_KEY, LOGIN)
NO_KEY = "kit-login-no-key"  # the trial spec's api_key on a login: never sent (the CLI sends the login's token)
CHATGPT_UPSTREAM = "https://chatgpt.com/backend-api/codex"  # where Codex sends a ChatGPT login's requests
MARGIN_S = 600.0  # a login whose access token expires sooner is refused: a trial would fail midway
CODEX_REFRESH_S = 8 * 86400.0  # Codex refreshes a login whose last_refresh is older (TOKEN_REFRESH_INTERVAL)
LOGIN_PINNED = ('cli_auth_credentials_store="file"', "features.apps=false", "features.image_generation=false")


def mode(options: Mapping[str, Any]) -> str:
    """``backend_options.auth``: ``api_key`` (default) or ``login``; anything else is refused."""
    value = options.get(OPTION, API_KEY)
    if value not in MODES:
        raise ParamError(f"backend_options.{OPTION}", f"got {value!r}", list(MODES))
    return str(value)


@dataclass(frozen=True)
class Login:
    """A user's login as read from their file: what a trial's copy holds, and what the record may say of it."""

    source: Path  # the user's file
    target: str  # where the CLI reads it, relative to the trial's home
    copy: dict[str, Any]  # the trial's copy: the file without its refresh token
    plan: str  # the plan the login names ("plus", "max", "unknown")
    expires: float | None  # the access token's expiry (epoch seconds), None when it does not say

    def describe(self) -> str:
        """The trial's ``versions["auth"]``: which login, from where, until when (no credential byte)."""
        until = time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime(self.expires)) if self.expires else "an unknown time"
        kind = "ChatGPT login" if self.target.startswith(".codex") else "Claude subscription login"
        shown = str(self.source).replace(str(Path.home()), "~", 1)
        return f"login: the user's {kind} (plan {self.plan}) from {shown}, valid until {until}; refresh token withheld"


def check(params: RunParams) -> RunParams:
    """Refuse ``auth: login`` where it cannot work, and read the login once before anything is written (a missing,
    foreign or expiring login stops the batch here); Codex's ``upstream_url`` defaults to ``CHATGPT_UPSTREAM``."""
    if mode(params.backend_options) == API_KEY:
        return params
    if params.endpoint != "real":  # only the CLIs take the option (kit.experiment.backends): both have a login
        problem = "'login' with endpoint 'embedded' would do nothing (the embedded provider knows no login or quota)"
        raise ParamError(f"backend_options.{OPTION}", problem, "api_key, or login with endpoint: real")
    read(params.backend)
    if params.backend == "codex" and params.upstream_url is None:
        return msgspec.structs.replace(params, upstream_url=CHATGPT_UPSTREAM)
    return params


def read(backend: str) -> Login:
    """The user's login for ``backend`` (``codex`` or ``claude``), checked; an ``InputError`` naming the file."""
    return READERS[backend]()


def install(login: Login, home: Path) -> None:
    """Write the trial's copy into ``home`` (created 0400, its folders 0700); ``remove`` takes it out again."""
    home.chmod(0o700)
    path = home / login.target
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.parent.chmod(0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
    with os.fdopen(fd, "w") as fh:
        json.dump(login.copy, fh)


def remove(login: Login | None, home: Path) -> None:
    """Take the trial's copy out of its home (also when the home is kept for debugging, ``keep_home``)."""
    if login is not None:
        (home / login.target).unlink(missing_ok=True)


def _load(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise InputError(f"{path}: no such file; log in with the CLI first (auth: login reads the CLI's own login)")
    try:
        value = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: not readable as JSON ({type(exc).__name__})") from None
    if not isinstance(value, dict):
        raise InputError(f"{path}: not a JSON object")
    return value


def _jwt_claims(token: object) -> dict[str, Any]:
    """A JWT's claims, unverified (the endpoint verifies it; the kit reads only the expiry and the plan)."""
    parts = token.split(".") if isinstance(token, str) else []
    if len(parts) != 3:
        return {}
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, UnicodeDecodeError):
        return {}
    return claims if isinstance(claims, dict) else {}


def _fresh(path: Path, expires: float | None, cli: str) -> None:
    if expires is not None and expires < time.time() + MARGIN_S:
        raise InputError(
            f"{path}: the login's access token expires within {MARGIN_S / 60:.0f} minutes; run {cli} once yourself to "
            "refresh it (a trial gets no refresh token: refreshing would use up yours)"
        )


def _codex() -> Login:
    path = Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex") / "auth.json"
    data = _load(path)
    tokens = data.get("tokens")
    if not isinstance(tokens, dict) or not isinstance(tokens.get("access_token"), str) or not tokens["access_token"]:
        raise InputError(f"{path}: no ChatGPT login (no tokens.access_token); log in with `codex login`")
    claims = _jwt_claims(tokens["access_token"])
    expires = float(claims["exp"]) if isinstance(claims.get("exp"), int | float) else None
    _fresh(path, expires, "codex")
    refreshed = _timestamp(data.get("last_refresh"))
    if refreshed is not None and refreshed + CODEX_REFRESH_S < time.time() + MARGIN_S:
        raise InputError(
            f"{path}: last refreshed over 8 days ago, so Codex would refresh it at once; run codex once yourself to "
            "refresh it (a trial gets no refresh token: refreshing would use up yours)"
        )
    auth = _jwt_claims(tokens.get("id_token")).get("https://api.openai.com/auth")
    plan = str(auth.get("chatgpt_plan_type") or "unknown") if isinstance(auth, dict) else "unknown"
    copy = {**data, "OPENAI_API_KEY": None, "tokens": {**tokens, "refresh_token": ""}}
    return Login(path, ".codex/auth.json", copy, plan, expires)


def _timestamp(value: object) -> float | None:
    """An RFC 3339 time (``2026-01-02T03:04:05.123Z``) as epoch seconds; None when absent or unreadable."""
    if not isinstance(value, str):
        return None
    try:
        return float(calendar.timegm(time.strptime(value[:19], "%Y-%m-%dT%H:%M:%S")))
    except ValueError:
        return None


def _claude() -> Login:
    path = Path(os.environ.get("CLAUDE_CONFIG_DIR") or Path.home() / ".claude") / ".credentials.json"
    oauth = _load(path).get("claudeAiOauth")
    if not isinstance(oauth, dict) or not isinstance(oauth.get("accessToken"), str) or not oauth["accessToken"]:
        raise InputError(f"{path}: no Claude subscription login (no claudeAiOauth.accessToken); log in with claude")
    expires = oauth["expiresAt"] / 1000 if isinstance(oauth.get("expiresAt"), int | float) else None
    _fresh(path, expires, "claude")
    copy = {"claudeAiOauth": {k: v for k, v in oauth.items() if k != "refreshToken"}}
    return Login(path, ".claude/.credentials.json", copy, str(oauth.get("subscriptionType") or "unknown"), expires)


READERS = {"codex": _codex, "claude": _claude}
