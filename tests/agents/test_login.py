"""``backend_options.auth: login``: the CLIs on the user's own login, offline (kit/agents/login.py).

A fake login (a ChatGPT ``auth.json``, a Claude ``.credentials.json``, each with marked tokens) in a temporary
``HOME``. The plumbing is checked without a model call: what a trial's home gets (mode 0400, no refresh token),
the environment (no key variable) and the refusals. End to end, each real CLI runs a small batch with
``endpoint: real`` whose upstream is the embedded provider, inside a network namespace that has only loopback:
every request carries the login's token (its cache domain in the proxy's log), each trial records its auth
mode, the user's files are untouched, and no byte of any token is anywhere in the batch folder.
"""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kit.agents import claude, cli_common, codex, login
from kit.agents.base import TrialSpec
from kit.errors import InputError
from kit.experiment.design import Arm, ParamError
from kit.stages import run
from tests.support import ROOT

# Made-up markers, not key-shaped: the tests look for these bytes in outputs, so any unique string will do.
ACCESS = {"codex": "ACCESSCODEXFAKE7e1d", "claude": "ACCESSCLAUDEFAKE9c2b"}
REFRESH = {"codex": "REFRESHCODEXFAKE41aa", "claude": "REFRESHCLAUDEFAKE55d0"}


def _b64(value: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


def _jwt(claims: dict) -> str:
    return f"{_b64({'alg': 'none'})}.{_b64(claims)}.c2lnbmF0dXJl"


def codex_access(expires_in: float) -> str:
    return _jwt({"exp": int(time.time() + expires_in), "marker": ACCESS["codex"]})


def write_logins(home: Path, expires_in: float = 5 * 86400, refreshed_ago: float = 3600) -> dict[str, list[str]]:
    """A fake ChatGPT login and a fake Claude login under ``home``; each file's secrets, as they must never appear."""
    id_token = _jwt({"email": "user@example.com", "https://api.openai.com/auth": {"chatgpt_plan_type": "plus"}})
    access = codex_access(expires_in)
    refreshed = time.strftime("%Y-%m-%dT%H:%M:%S.123456789Z", time.gmtime(time.time() - refreshed_ago))
    tokens = {"id_token": id_token, "access_token": access, "refresh_token": REFRESH["codex"], "account_id": "acct-7"}
    (home / ".codex").mkdir(parents=True, exist_ok=True)
    (home / ".codex" / "auth.json").write_text(json.dumps({"tokens": tokens, "last_refresh": refreshed}))
    oauth = {
        "accessToken": ACCESS["claude"],
        "refreshToken": REFRESH["claude"],
        "expiresAt": int((time.time() + expires_in) * 1000),
        "scopes": ["user:inference", "user:profile", "user:sessions:claude_code"],
        "subscriptionType": "max",
    }
    (home / ".claude").mkdir(parents=True, exist_ok=True)
    (home / ".claude" / ".credentials.json").write_text(json.dumps({"claudeAiOauth": oauth}))
    return {
        "codex": [access, id_token, REFRESH["codex"], ACCESS["codex"]],
        "claude": [ACCESS["claude"], REFRESH["claude"]],
    }


@pytest.fixture
def user_home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "user"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("CODEX_HOME", raising=False)
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    return home


def params(backend: str, **more: object) -> dict:
    from kit.cli import pipeline

    values = pipeline.load_params(str(ROOT / "params" / "demo.yaml"))
    values.update({"backend": backend, "backend_options": {"auth": "login"}, "endpoint": "real", **more})
    return values


# ---------------------------------------------------------------- refusals, before anything is written


@pytest.mark.parametrize("backend", ["codex", "claude"])
def test_login_on_the_embedded_provider_is_refused_as_doing_nothing(user_home, backend):
    write_logins(user_home)
    with pytest.raises(ParamError, match=r"backend_options.auth.*would do nothing"):
        run.configure(params(backend, endpoint="embedded"))


def test_login_is_for_the_clis_and_its_value_is_checked(user_home):
    with pytest.raises(ParamError, match=r"unknown option\(s\) \['auth'\] for backend 'sdk-openai'"):
        run.configure(params("sdk-openai"))  # the SDK agents take a key only
    with pytest.raises(ParamError, match=r"backend_options.auth.*got 'oauth'.*\['api_key', 'login'\]"):
        run.configure(params("codex", backend_options={"auth": "oauth"}))


@pytest.mark.parametrize("backend", ["codex", "claude"])
def test_a_missing_login_is_named_by_its_file(user_home, backend):
    with pytest.raises(InputError, match="no such file; log in with the CLI first") as refused:
        run.configure(params(backend))
    assert str(user_home) in str(refused.value)


@pytest.mark.parametrize("backend", ["codex", "claude"])
def test_an_expiring_login_is_refused_since_a_trial_may_not_refresh_it(user_home, backend):
    write_logins(user_home, expires_in=login.MARGIN_S / 2)
    with pytest.raises(InputError, match=f"expires within 10 minutes; run {backend} once yourself") as refused:
        run.configure(params(backend))
    assert not any(s in str(refused.value) for s in (*ACCESS.values(), *REFRESH.values()))


def test_a_codex_login_codex_would_refresh_at_once_is_refused(user_home):
    write_logins(user_home, refreshed_ago=8 * 86400)
    with pytest.raises(InputError, match="last refreshed over 8 days ago"):
        run.configure(params("codex"))


def test_an_api_key_login_file_is_not_a_chatgpt_login(user_home):
    (user_home / ".codex").mkdir()
    (user_home / ".codex" / "auth.json").write_text(json.dumps({"OPENAI_API_KEY": "sk-x"}))
    with pytest.raises(InputError, match="no ChatGPT login"):
        run.configure(params("codex"))


def test_codex_on_a_login_goes_to_the_chatgpt_backend_and_needs_no_key(user_home, monkeypatch):
    write_logins(user_home)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    cfg = run.configure(params("codex"))
    assert cfg.params.upstream_url == login.CHATGPT_UPSTREAM
    assert run._api_key(cfg) == login.NO_KEY
    assert run.configure(params("claude")).params.upstream_url is None  # Claude Code's login: api.anthropic.com


# ---------------------------------------------------------------- what a trial's home and environment get


@pytest.mark.parametrize("backend", ["codex", "claude"])
def test_the_trial_home_gets_a_read_only_copy_without_the_refresh_token(user_home, tmp_path, backend):
    write_logins(user_home)
    before = {p: p.read_bytes() for p in user_home.rglob("*") if p.is_file()}
    signed_in = login.read(backend)
    home = tmp_path / "trial-home"
    home.mkdir()
    login.install(signed_in, home)
    copy = home / signed_in.target
    assert stat.S_IMODE(copy.stat().st_mode) == 0o400
    assert stat.S_IMODE(home.stat().st_mode) == stat.S_IMODE(copy.parent.stat().st_mode) == 0o700
    text = copy.read_text()
    assert ACCESS[backend] in text or signed_in.copy["tokens"]["access_token"] in text
    assert REFRESH[backend] not in text
    assert signed_in.describe().startswith(
        "login: the user's ChatGPT login (plan plus) from ~/.codex/auth.json, valid until "
        if backend == "codex"
        else "login: the user's Claude subscription login (plan max) from ~/.claude/.credentials.json, valid until "
    )
    login.remove(signed_in, home)
    assert not copy.exists()
    assert {p: p.read_bytes() for p in user_home.rglob("*") if p.is_file()} == before


def _spec(tmp_path: Path, auth: str) -> TrialSpec:
    return TrialSpec(
        batch="t", trial_id="t", arm=Arm("a"), run=0, order_index=0, nonce="0123456789abcdef",
        isolation=frozenset({"nonce", "cache_bust_tool"}), prompt_cache_key=None, prompts=("hi",), workdir=tmp_path,
        out_dir=tmp_path, base_url="http://127.0.0.1:9/t/t", api_key=login.NO_KEY, model="m", options={"auth": auth},
    )  # fmt: skip


def test_the_child_environment_holds_no_key_on_a_login(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-planted")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "planted-key-not-real")
    args, kit_env = codex.config_args(_spec(tmp_path, "login"), tmp_path)
    env = cli_common.child_env(_spec(tmp_path, "login"), kit_env)
    assert not [name for name in env if name.endswith("_API_KEY")]
    provider = next(a for a in args if a.startswith("model_providers.kit="))
    assert "requires_openai_auth=true" in provider and "env_key" not in provider
    assert 'base_url="http://127.0.0.1:9/t/t"' in provider  # the ChatGPT backend's paths: no /v1
    assert all(setting in args for setting in login.LOGIN_PINNED)
    _, kit_env = claude.options(_spec(tmp_path, "login"), tmp_path)
    assert not [name for name in cli_common.child_env(_spec(tmp_path, "login"), kit_env) if name.endswith("_KEY")]
    # the default is unchanged: a key, in the variable the provider config names
    args, kit_env = codex.config_args(_spec(tmp_path, "api_key"), tmp_path)
    assert kit_env[codex.EMBEDDED_KEY_ENV] == login.NO_KEY and not set(login.LOGIN_PINNED) & set(args)
    assert claude.options(_spec(tmp_path, "api_key"), tmp_path)[1]["ANTHROPIC_API_KEY"] == login.NO_KEY


# ---------------------------------------------------------------- the real CLIs on a fake login, offline

BATCH_SCRIPT = textwrap.dedent(
    """
    import json, subprocess, sys
    from pathlib import Path
    if sys.argv[2] == "netns":
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    from kit.cli import pipeline
    from kit.provider import serve
    from kit.provider.log import domain_of, read
    from kit.stages import run
    out, backend = Path(sys.argv[1]), sys.argv[3]
    values = pipeline.load_params("params/demo.yaml")
    values.update(outputs_dir=str(out), batch="login", backend=backend, runs_per_arm=1, salt="login01",
                  backend_options={"auth": "login"}, endpoint="real", timeout_s=600.0)
    settings = run.provider_settings(run.configure({**values, "endpoint": "embedded", "backend_options": {}}),
                                     "login01")
    with serve(**vars(settings)) as upstream:  # the kit's provider as the real endpoint, on the real paths
        suffix = "/backend-api/codex" if backend == "codex" else ""
        folder = run.run_batch(run.configure({**values, "upstream_url": upstream.base_url + suffix}), progress=False)
    print(json.dumps({"folder": str(folder), "work": str(run.work_root(run.BatchDir(folder)))}))
    """
)


@pytest.mark.e2e
@pytest.mark.parametrize("backend", ["codex", "claude"])
def test_a_batch_on_the_users_login_uses_it_and_writes_no_credential_byte(tmp_path, backend):
    if not (cli_common.TOOLS_BIN / backend).exists():
        pytest.skip(f"{backend} CLI not installed in {cli_common.TOOLS_BIN} (make e2e-tools)")
    netns = subprocess.run(["unshare", "--net", "--map-root-user", "true"], capture_output=True).returncode == 0
    if not netns:
        pytest.skip("needs unshare --net: a namespace with only loopback, so nothing reaches a real endpoint")
    home = tmp_path / "user"
    written = write_logins(home)
    secrets = [*written["codex"], *written["claude"]]  # neither login may leak, whichever CLI runs
    files = [home / ".codex" / "auth.json", home / ".claude" / ".credentials.json"]
    before = [p.read_bytes() for p in files]
    script = tmp_path / "batch.py"
    script.write_text(BATCH_SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and k not in ("CODEX_HOME",)}
    env.update(HOME=str(home), PYTHONPATH=str(ROOT))
    done = subprocess.run(
        ["unshare", "--net", "--map-root-user", sys.executable, str(script), str(tmp_path / "out"), "netns", backend],
        capture_output=True, text=True, timeout=1200, cwd=ROOT, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    where = json.loads(done.stdout.strip().splitlines()[-1])
    folder = Path(where["folder"])
    from kit.experiment.layout import BatchDir, TrialDir
    from kit.provider.log import domain_of
    from kit.provider.log import read as read_log

    bd = BatchDir(folder)
    metas = [TrialDir(t).read_meta() for t in bd.trial_dirs()]
    assert [m.status for m in metas] == ["ok", "ok"], [m.reason for m in metas]
    kind = "ChatGPT login (plan plus)" if backend == "codex" else "Claude subscription login (plan max)"
    assert all(m.versions["auth"].startswith(f"login: the user's {kind}") for m in metas)
    assert all(m.simulated for m in metas)  # the upstream was the kit's own provider, and says so
    lines = [r for r in read_log(bd.request_log) if r.get("api")]
    token = written[backend][0]  # the access token: what the CLI must send instead of a key
    assert lines and {r["domain"] for r in lines} == {domain_of(token)}, {r["domain"] for r in lines}
    for m in metas:  # no key in the recorded command lines
        commands = json.loads((bd.trial_dir(m.trial_id).root / cli_common.RUNS_FILE).read_text())
        assert not [w for c in commands for w in c["command"] if "_API_KEY=" in w]
    # no credential byte anywhere in the batch folder, nor left in a trial home
    leaked = [(str(p), s) for p in folder.rglob("*") if p.is_file() for s in secrets if s.encode() in p.read_bytes()]
    assert leaked == []
    homes = Path(where["work"]) / ".homes"
    assert not [p for p in homes.rglob("*") if p.name in ("auth.json", ".credentials.json")] if homes.exists() else True
    assert [p.read_bytes() for p in files] == before  # the user's login untouched
