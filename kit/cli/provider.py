"""``python -m kit provider serve|proxy``: the embedded provider, or the recording proxy in front of a real
endpoint, on loopback until interrupted."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from kit.errors import InputError, KitError
from kit.params import add_parameter_options


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m kit provider serve",
        description="Serve the simulated OpenAI / Anthropic endpoints on loopback; prints the base URL and the "
        "settings that point SDKs, Codex CLI and Claude Code at it.",
    )
    p.add_argument("--port", type=int, default=0, help="TCP port (default: a free one)")
    p.add_argument(
        "--profile",
        default=None,
        help="cache profile for every route (default: each API's own: openai-implicit for /v1/responses and "
        "/v1/chat/completions, anthropic for /v1/messages)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the policy and the cache survival draws")
    p.add_argument("--survival", type=float, default=1.0, help="cache entry survival probability in [0, 1]")
    p.add_argument("--log", default=None, help="request log path (default: a temporary file)")
    p.add_argument("--host", default="127.0.0.1", help="bind address (loopback unless --allow-non-loopback)")
    p.add_argument("--allow-non-loopback", action="store_true", help="allow binding a non-loopback address")
    batch = p.add_argument_group(
        "as a batch's run stage would serve it",
        "a batch's parameters, as `python -m kit batch` takes them, with its salt (-p salt S): the pack's scripted "
        "model, the batch's cache profile, seed and survival instead of --profile/--seed/--survival; a batch run "
        "with -p endpoint real -p upstream_url <this server>/v1 is then answered as the same batch run directly",
    )
    add_parameter_options(batch)
    return p


def _proxy_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m kit provider proxy",
        description="Forward every request to a real endpoint unchanged and log each model request in the embedded "
        "provider's format (prompt segments, usage, trial id); API keys are forwarded, never written.",
    )
    p.add_argument(
        "--upstream",
        default=None,
        help="the endpoint's origin (plus any path prefix, without /v1), e.g. https://api.openai.com "
        "(default: each API's public endpoint: api.anthropic.com for Messages, api.openai.com otherwise)",
    )
    p.add_argument("--port", type=int, default=0, help="TCP port (default: a free one)")
    p.add_argument("--log", default=None, help="request log path (default: a temporary file)")
    p.add_argument("--host", default="127.0.0.1", help="bind address (loopback unless --allow-non-loopback)")
    p.add_argument("--allow-non-loopback", action="store_true", help="allow binding a non-loopback address")
    return p


def _proxy_main(args: Sequence[str]) -> int:
    """Run the recording proxy until interrupted."""
    p = _proxy_parser()
    options = p.parse_args(args)
    from kit.provider.proxy_server import proxy_forever

    return _until_interrupted(p, proxy_forever, options, upstream=options.upstream)


def _until_interrupted(p: argparse.ArgumentParser, forever: Any, options: argparse.Namespace, **settings: Any) -> int:
    """Run a service (``serve_forever``, ``proxy_forever``) on the address options both commands take, until
    interrupted; a refusal (a ``KitError``, e.g. a non-loopback host) is the parser's one-line error."""
    try:
        forever(
            port=options.port,
            host=options.host,
            log_path=options.log,
            allow_non_loopback=options.allow_non_loopback,
            **settings,
        )
    except KitError as exc:
        p.error(str(exc))
    return 0


USAGE = "usage: python -m kit provider {serve,proxy} [options]  (python -m kit provider serve --help: options)"


def main(argv: Sequence[str] | None = None) -> int:
    """Serve (or proxy) until interrupted: ``argv`` starts with the word ``serve`` or ``proxy``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] in (["-h"], ["--help"]):
        print(USAGE)
        return 0
    if args[:1] == ["proxy"]:
        return _proxy_main(args[1:])
    if args[:1] != ["serve"]:
        print(USAGE, file=sys.stderr)
        return 2
    return _serve_main(args[1:])


def _serve_main(args: list[str]) -> int:
    """Run the embedded provider until interrupted, with its own settings or, given batch parameters (-f/-y/-p),
    those the batch's run stage would use."""
    p = parser()
    options = p.parse_args(args)
    if not 0.0 <= options.survival <= 1.0:
        p.error(f"--survival must be in [0, 1], got {options.survival}")
    from kit.provider.cache import profile_names
    from kit.provider.server import serve_forever

    if options.profile is not None and options.profile not in profile_names():
        p.error(f"--profile {options.profile!r} is not one of {profile_names()}")
    settings = {"profile": options.profile, "seed": options.seed, "survival": options.survival}
    if options.file or options.yaml or options.pairs:
        overridden = [f"--{n}" for n in settings if f"--{n}" in args or any(a.startswith(f"--{n}=") for a in args)]
        if overridden:
            p.error(f"{', '.join(overridden)} cannot be given with batch parameters (the batch sets them)")
        try:
            settings = _served_batch(options.file, options.yaml, [tuple(pair) for pair in options.pairs])
        except KitError as exc:
            p.error(str(exc))
    return _until_interrupted(p, serve_forever, options, **settings)


def _served_batch(file: str | None, yaml_texts: list[str], pairs: list[tuple[str, str]]) -> dict:
    """``provider serve -f …``: the settings the run stage's provider would use for this batch and salt."""
    from kit.cli import pipeline
    from kit.stages import run

    cfg = run.configure(pipeline.load_params(file, yaml_texts, pairs))  # salt checked as text with the rest
    if cfg.params.salt is None:
        raise InputError("serving as a batch needs the batch's salt: -p salt S (the manifest's salt)")
    return vars(run.provider_settings(cfg, cfg.params.salt))
