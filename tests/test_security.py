"""Security: the provider stays on loopback, no key material reaches any output, the real CLIs reach nothing but
loopback, and the SDK agents' file tools cannot read outside the task's fixture folder."""

from __future__ import annotations

import base64
import errno
import json
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kit import tasks
from kit.agents import cli_common, sdk
from kit.agents.base import TrialSpec
from kit.agents.filetools import FileTools, ToolError
from kit.cli import pipeline
from kit.experiment.design import Arm
from kit.experiment.layout import BatchDir
from kit.provider import Reply, ToolCall, serve
from kit.provider.log import read as read_log
from kit.provider.service import check_host
from kit.stages import analyze, parse, plot, run
from tests.support import ROOT, cli_env

MISSING = [name for name in ("codex", "claude") if not (cli_common.TOOLS_BIN / name).exists()]
needs_clis = pytest.mark.skipif(bool(MISSING), reason=f"CLI binaries absent: {MISSING} (run `make e2e-tools`)")


def _netns_works() -> bool:
    if not shutil.which("unshare") or not shutil.which("ip"):
        return False
    probe = subprocess.run(["unshare", "--net", "--map-root-user", "true"], capture_output=True, timeout=10)
    return probe.returncode == 0


NETNS = _netns_works()


# ------------------------------------------------------------------ loopback only


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "0", "192.0.2.1", "::ffff:127.0.0.1", "10.255.255.1"])
def test_non_loopback_binds_are_refused_by_default(host):
    with pytest.raises(ValueError, match="loopback"), serve(host=host):
        pass


@pytest.mark.parametrize("host", ["127.0.0.1", "127.3.2.1", "::1", "localhost"])
def test_loopback_binds_serve(host):
    try:
        with serve(host=host) as p:
            assert p.host in ("127.0.0.1", "127.3.2.1", "::1")
    except OSError as exc:  # an IPv6-less machine cannot bind ::1
        pytest.skip(f"{host}: {exc}")


def _serve_cli(*args: str, netns: bool = False) -> subprocess.Popen:
    prefix = ["unshare", "--net", "--map-root-user"] if netns else []
    argv = [*prefix, sys.executable, "-m", "kit", "provider", "serve", "--port", "0", *args]
    return subprocess.Popen(argv, cwd=ROOT, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_the_command_line_refuses_a_non_loopback_host_without_the_flag():
    proc = _serve_cli("--host", "0.0.0.0")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 2 and out == ""
    assert "refusing to bind '0.0.0.0'" in err and "--allow-non-loopback" in err


def test_the_command_line_serves_loopback_by_default():
    proc = _serve_cli()
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.skipif(not NETNS, reason="needs unshare --net (a namespace with only loopback) to bind 0.0.0.0 safely")
def test_the_command_line_binds_elsewhere_only_with_the_flag_and_warns():
    """0.0.0.0 inside an empty network namespace: the flag's path runs without exposing this machine."""
    proc = _serve_cli("--host", "0.0.0.0", "--allow-non-loopback", netns=True)
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://0.0.0.0:")
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=120)
    assert "the simulated provider is listening on non-loopback '0.0.0.0'" in err


def test_check_host_warns_when_allowed():
    with pytest.warns(UserWarning, match="non-loopback"):
        check_host("192.0.2.1", allow_non_loopback=True)


# ------------------------------------------------------------------ no key material in any output

PLANTED = {
    "OPENAI_API_KEY": "sk-proj-PLANTEDopenaiKEY4f9c2a7b1e8d3c6a0b5f",
    "ANTHROPIC_API_KEY": "sk-ant-api03-PLANTEDanthropicKEY7d2e9f4a1c8b",
    "CODEX_API_KEY": "PLANTEDcodexKEY0a1b2c3d4e5f60718293",
    "GITHUB_TOKEN": "ghp_PLANTEDgithubTOKEN1234567890abcdefAB",
    "AWS_SECRET_ACCESS_KEY": "PLANTEDawsSECRET/wJalrXUtnFEMIK7MDENGbPxRfiCY",
    "HF_TOKEN": "hf_PLANTEDhuggingfaceTOKENabcdefghijklmn",
}


def key_material(value: str) -> list[bytes]:
    """The forms a leaked key takes: itself, a middle run of it, its base64 and its hex."""
    raw = value.encode()
    return [raw, raw[6:22], base64.b64encode(raw)[4:28], raw.hex().encode()[8:40]]


def assert_no_key_material(*roots: Path) -> int:
    """Grep every byte of every file below ``roots``; returns how many files were read."""
    needles = [(name, n) for name, value in PLANTED.items() for n in key_material(value)] + [("marker", b"PLANTED")]
    files = 0
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file() and not path.is_symlink():
                data = path.read_bytes()
                files += 1
                for name, needle in needles:
                    assert needle not in data, f"{name} key material in {path}"
    return files


@pytest.fixture
def planted(monkeypatch):
    for name, value in PLANTED.items():
        monkeypatch.setenv(name, value)


def _batch_values(tmp: Path, backend: str, **over) -> dict:
    params = pipeline.load_params(str(ROOT / "params/demo.yaml"))
    params.update(outputs_dir=str(tmp), batch=f"keys-{backend}", backend=backend, profile=None, runs_per_arm=2,
                  n_resamples=1_000, warmth_levels=3, concurrency=2, timeout_s=60.0)  # fmt: skip
    params.update(over)
    return params


def _every_stage_in_process(params: dict) -> Path:
    """run, parse, analyze, plot through the functions the notebooks call (the fast path of CI)."""
    folder = run.run_batch(run.configure(params), progress=False)
    parse.parse_batch(folder)
    analyze.analyze_batches([folder], n_resamples=params["n_resamples"], warmth_levels=params["warmth_levels"])
    plot.publish(folder)
    return folder


BACKENDS = [
    "sdk-openai",
    "sdk-anthropic",
    pytest.param("codex", marks=[pytest.mark.e2e, needs_clis]),
    pytest.param("claude", marks=[pytest.mark.e2e, needs_clis]),
]


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_key_material_in_a_batch_on_any_backend(tmp_path, planted, backend):
    params = _batch_values(tmp_path, backend)
    if backend in ("codex", "claude"):
        params.update(model="sim-model", runs_per_arm=1)
    folder = _every_stage_in_process(params)
    assert {m["status"] for m in (json.loads(p.read_text()) for p in folder.glob("raw/*/meta.json"))} == {"ok"}
    assert (folder / "raw/_provider/requests.jsonl").stat().st_size > 0 and (folder / "report.html").exists()
    assert assert_no_key_material(folder, run.work_root(BatchDir(folder))) > 10


def test_no_key_material_in_the_notebooks_and_html_exports(tmp_path, planted):
    """The papermill path: every stage's executed notebook and its HTML export, the tables, the provider log."""
    folder = pipeline.execute(_batch_values(tmp_path, "sdk-anthropic"), progress=False)
    assert {p.name for p in folder.glob("*.html")} == {f"{s}.html" for s in pipeline.STAGES} | {"report.html"}
    assert assert_no_key_material(folder) > 20


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_no_key_material_in_a_full_papermill_batch_on_any_backend(tmp_path, planted, backend):
    params = _batch_values(tmp_path, backend)
    if backend in ("codex", "claude"):
        params.update(model="sim-model", runs_per_arm=1)
    folder = pipeline.execute(params, progress=False)
    assert assert_no_key_material(folder, run.work_root(BatchDir(folder))) > 20


def test_a_key_given_to_a_trial_is_masked_in_what_is_recorded(tmp_path, planted):
    """Even a key that reaches a command line or an error message is masked before it is written."""
    from kit.experiment.redact import redact, redact_text

    leaked = f"Authorization: Bearer {PLANTED['OPENAI_API_KEY']} and {PLANTED['GITHUB_TOKEN']}"
    assert "PLANTED" not in redact_text(leaked)
    shown = cli_common.shown_command(["codex", "exec"], {"OPENAI_API_KEY": PLANTED["OPENAI_API_KEY"]}, {})
    assert "PLANTED" not in " ".join(shown)
    assert "PLANTED" not in json.dumps(redact({"api_key": PLANTED["HF_TOKEN"], "note": leaked}))


# ------------------------------------------------------------------ the real CLIs reach loopback only

NETWORK_SCRIPT = textwrap.dedent(
    """
    import json, os, socket, subprocess, sys, threading
    from pathlib import Path
    unreachable = None
    if sys.argv[2] == "netns":
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
        try:  # TEST-NET-1 (never routed anywhere): proves this namespace has no route out at all
            socket.create_connection(("192.0.2.1", 80), timeout=2)
        except OSError as exc:
            unreachable = exc.errno
    trap = socket.socket(); trap.bind(("127.0.0.1", 0)); trap.listen(64)
    hits = []
    def serve_trap():
        while True:
            conn, _ = trap.accept()
            hits.append(conn.recv(4096).decode(errors="replace")[:200]); conn.close()
    threading.Thread(target=serve_trap, daemon=True).start()
    proxy = f"http://127.0.0.1:{trap.getsockname()[1]}"
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy", "all_proxy"):
        os.environ[name] = proxy  # a user's proxies: never handed to a CLI talking to the embedded provider
    from kit import tasks
    from kit.stages import run
    from kit.agents import claude, codex
    from kit.agents.base import TrialSpec
    from kit.experiment.design import Arm
    from kit.provider import serve
    from kit.provider.log import read
    root = Path(sys.argv[1]); wd = root / "work" / "repo_a"; wd.mkdir(parents=True)
    pack = tasks.get("batch-read"); pack.prepare(wd)
    results = {}
    for backend, runner, profile in (("codex", codex.run_trial, "openai-implicit"),
                                     ("claude", claude.run_trial, "anthropic")):
        out = root / backend; out.mkdir()
        with serve(profile=profile, policy=pack.policy(), log_path=root / f"{backend}.jsonl") as p:
            spec = TrialSpec(batch="net", trial_id=backend, arm=Arm("a"), run=0, order_index=0, nonce="n" + backend,
                isolation=frozenset({"nonce", "cache_bust_tool"}), prompt_cache_key=None,
                prompts=tuple(pack.prompts_for(0)), workdir=wd, out_dir=out, base_url=p.trial_base_url(backend),
                api_key=run.EMBEDDED_KEY, model="sim-model", timeout_s=90)
            outcome = runner(backend, spec)
        log = read(root / f"{backend}.jsonl")
        results[backend] = {"status": outcome.status, "reason": outcome.reason, "cycles": outcome.cycles,
                            "logged": len(log), "statuses": sorted({r["status"] for r in log}),
                            "trials": sorted({r["trial_id"] for r in log}),
                            "grade": pack.grade(outcome.final_answer).score}
    print(json.dumps({"results": results, "trap_hits": hits, "unreachable": unreachable}))
    """
)


@pytest.mark.e2e
@needs_clis
def test_real_clis_complete_with_only_loopback_and_every_request_logged(tmp_path):
    """Each CLI runs a whole session inside a network namespace that has nothing but loopback (when unshare
    works), with every proxy variable pointing at a loopback trap that records any connection: the session
    completes, every model request is in the provider's log, and nothing reaches the trap."""
    script = tmp_path / "net.py"
    script.write_text(NETWORK_SCRIPT)
    prefix = ["unshare", "--net", "--map-root-user"] if NETNS else []
    done = subprocess.run(
        [*prefix, sys.executable, str(script), str(tmp_path / "run"), "netns" if NETNS else "host"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["trap_hits"] == []
    if NETNS:
        assert report["unreachable"] == errno.ENETUNREACH
    for backend, r in report["results"].items():
        assert r["status"] == "ok", (backend, r["reason"])
        assert r["grade"] == 1.0
        assert r["logged"] == r["cycles"] >= 4 and r["statuses"] == [200] and r["trials"] == [backend]


def test_cli_environment_drops_proxies_and_keys_for_the_embedded_provider(tmp_path, planted, monkeypatch):
    for name in cli_common.NETWORK_ENV:
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    spec = TrialSpec(
        batch="t", trial_id="t", arm=Arm("a"), run=0, order_index=0, nonce="n", isolation=frozenset(),
        prompt_cache_key=None, prompts=("hi",), workdir=tmp_path, out_dir=tmp_path,
        base_url="http://127.0.0.1:8000/t/t", api_key=run.EMBEDDED_KEY, model="m",
    )  # fmt: skip
    env = cli_common.child_env(spec, {"HOME": str(tmp_path)})
    assert not set(env) & (set(cli_common.NETWORK_ENV) | set(PLANTED))
    assert "PLANTED" not in json.dumps(env)


# ------------------------------------------------------------------ the SDK agents' file tools stay inside


@pytest.fixture
def fixture_root(tmp_path) -> Path:
    """A fixture folder with traps around it: a secret beside it and links pointing out of it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("TOP-SECRET-OUTSIDE\n")
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    (root / "src" / "main.py").write_text("def main():\n    return 1\n")
    (root / "README.md").write_text("hello\n")
    (root / "link_file").symlink_to(outside / "secret.txt")
    (root / "link_dir").symlink_to(outside, target_is_directory=True)
    (root / "src" / "up").symlink_to(Path("..") / ".." / "outside")
    (root / "loop_a").symlink_to(root / "loop_b")
    (root / "loop_b").symlink_to(root / "loop_a")
    (root / "inside_link").symlink_to(root / "README.md")  # a link that stays inside is fine
    return root


ESCAPES = [
    "../outside/secret.txt",
    "../../etc/passwd",
    "/etc/passwd",
    str(Path("/") / "tmp"),
    "src/../../outside/secret.txt",
    "link_file",
    "link_dir/secret.txt",
    "src/up/secret.txt",
    "loop_a",
    "README.md\0../outside/secret.txt",
    "~/.ssh/id_rsa",
]


@pytest.mark.parametrize("path", ESCAPES)
def test_read_file_refuses_every_way_out(fixture_root, path):
    tools = FileTools(fixture_root)
    with pytest.raises(ToolError):
        tools.call("read_file", {"path": path})


@pytest.mark.parametrize("path", ["..", "/", "link_dir", "src/up", "loop_a"])
def test_list_files_refuses_folders_outside(fixture_root, path):
    with pytest.raises(ToolError):
        FileTools(fixture_root).call("list_files", {"path": path})


def test_listing_grep_and_explore_see_only_the_inside(fixture_root):
    tools = FileTools(fixture_root, ("explore",))
    listed = tools.call("list_files", {}).splitlines()
    assert listed == ["README.md", "inside_link", "src/main.py"]
    assert tools.call("read_file", {"path": "inside_link"}) == "hello\n"
    assert "TOP-SECRET" not in tools.call("grep", {"pattern": "SECRET|."})
    assert "TOP-SECRET" not in tools.call("explore", {"query": "secret main"})
    for bad in ({"path": 5}, {"path": None}, {"nope": "x"}):
        with pytest.raises(ToolError):
            tools.call("read_file", bad)


def test_a_huge_file_is_read_only_up_to_what_a_reply_holds(fixture_root):
    from kit.agents.filetools import MAX_CHARS

    (fixture_root / "big.txt").write_bytes(b"a\r\n" * (MAX_CHARS * 2))
    text = FileTools(fixture_root).call("read_file", {"path": "big.txt"})
    assert len(text) == MAX_CHARS and "\r" not in text  # newlines as a text read gives them


class Escaper:
    """A model that tries every way out of the fixture, then answers with what it was given."""

    name = "escaper"

    def reply(self, conv):
        tries = [{"path": p} for p in ESCAPES[:9]]
        if conv.cycle < len(tries):
            return Reply(f"try {conv.cycle}", (ToolCall("read_file", tries[conv.cycle]),))
        if conv.cycle == len(tries):
            return Reply("list", (ToolCall("list_files", {}), ToolCall("grep", {"pattern": "SECRET"})))
        return Reply("\n".join(m.text for m in conv.messages if m.role == "tool"))


@pytest.mark.parametrize("backend", ["sdk-openai", "sdk-anthropic"])
def test_an_agent_asking_for_files_outside_gets_errors_and_nothing_else(fixture_root, tmp_path, backend):
    out = tmp_path / "out"
    out.mkdir()
    with serve(policy=Escaper(), profile="anthropic", log_path=tmp_path / "log.jsonl") as p:
        spec = TrialSpec(
            batch="t", trial_id="esc", arm=Arm("a"), run=0, order_index=0, nonce="n", isolation=frozenset(),
            prompt_cache_key=None, prompts=("read everything",), workdir=fixture_root, out_dir=out,
            base_url=p.trial_base_url("esc"), api_key=run.EMBEDDED_KEY, model="sim-model", timeout_s=60,
        )  # fmt: skip
        outcome = sdk.run_trial(backend, spec)
    assert outcome.status == "ok" and outcome.cycles == 11
    assert outcome.final_answer.count("error: ") == 9  # every try came back as a tool error the model sees
    assert len(read_log(tmp_path / "log.jsonl")) == 11
    for path in (out, tmp_path / "log.jsonl"):
        data = b"".join(f.read_bytes() for f in ([path] if path.is_file() else path.rglob("*")) if f.is_file())
        assert b"TOP-SECRET" not in data
    assert "outside the repository" in outcome.final_answer


def test_an_sdk_agent_never_falls_back_to_another_host(tmp_path):
    """The kit's own agent talks to the base URL it is given and nowhere else: a trial against a closed
    loopback port fails with a connection error and does not fall back to any other host."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    wd = tmp_path / "repo"
    wd.mkdir()
    tasks.get("batch-read").prepare(wd)
    spec = TrialSpec(
        batch="t", trial_id="c", arm=Arm("a"), run=0, order_index=0, nonce="n", isolation=frozenset(),
        prompt_cache_key=None, prompts=("hi",), workdir=wd, out_dir=tmp_path, base_url=f"http://127.0.0.1:{closed}",
        api_key=run.EMBEDDED_KEY, model="m", timeout_s=10,
    )  # fmt: skip
    for backend in ("sdk-openai", "sdk-anthropic"):
        outcome = sdk.run_trial(backend, spec)
        assert outcome.status == "failed" and "APIConnectionError" in outcome.reason
