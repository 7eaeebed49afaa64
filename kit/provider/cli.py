"""``python -m kit provider serve|proxy``: the embedded provider, or the recording proxy in front of a real
endpoint, on loopback until interrupted."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


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
    return p


def proxy_parser() -> argparse.ArgumentParser:
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


def proxy_main(args: Sequence[str]) -> int:
    """Run the recording proxy until interrupted."""
    p = proxy_parser()
    options = p.parse_args(args)
    from kit.provider.proxy_server import proxy_forever

    try:
        proxy_forever(
            upstream=options.upstream,
            port=options.port,
            host=options.host,
            log_path=options.log,
            allow_non_loopback=options.allow_non_loopback,
        )
    except ValueError as exc:
        p.error(str(exc))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Serve (or proxy) until interrupted. ``argv`` starts with ``proxy`` for the proxy; otherwise it is the
    serve command's, with or without the word ``serve`` (``python -m kit`` strips it today)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["proxy"]:
        return proxy_main(args[1:])
    if args[:1] == ["serve"]:
        args = args[1:]
    p = parser()
    options = p.parse_args(args)
    if not 0.0 <= options.survival <= 1.0:
        p.error(f"--survival must be in [0, 1], got {options.survival}")
    from kit.provider.cache import profile_names
    from kit.provider.server import serve_forever

    if options.profile is not None and options.profile not in profile_names():
        p.error(f"--profile {options.profile!r} is not one of {profile_names()}")
    try:
        serve_forever(
            profile=options.profile,
            seed=options.seed,
            port=options.port,
            host=options.host,
            log_path=options.log,
            survival=options.survival,
            allow_non_loopback=options.allow_non_loopback,
        )
    except ValueError as exc:
        p.error(str(exc))
    return 0
