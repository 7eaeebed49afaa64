"""``python -m kit``: batch, provider serve, parse, ping (the public command line of DESIGN.md)."""

from __future__ import annotations

import argparse
import sys


def _batch(argv: list[str]) -> int:
    from kit import pipeline

    ap = argparse.ArgumentParser(prog="python -m kit batch", description="Run the four notebooks into outputs/<batch>/")
    ap.add_argument("-f", "--parameters-file", dest="file", help="YAML parameter file (params/*.yaml)")
    ap.add_argument("-y", "--parameters-yaml", dest="yaml", action="append", default=[], help="YAML string")
    ap.add_argument("-p", "--parameters", dest="pairs", nargs=2, action="append", default=[], metavar=("KEY", "VALUE"))
    ap.add_argument("--stages", default=",".join(pipeline.STAGES), help="comma-separated subset, in order")
    args = ap.parse_args(argv)
    params = pipeline.load_params(args.file, args.yaml, [tuple(p) for p in args.pairs])
    try:
        folder = pipeline.execute(params, stages=[s for s in args.stages.split(",") if s])
    except (pipeline.StageFailed, ValueError) as exc:  # ValueError covers ParamError: a named, located message
        print(f"error: {exc}", file=sys.stderr)
        return 1
    from kit import publish

    print(f"batch folder: {folder}")
    if "analyze" in args.stages:
        print(publish.headline_for(folder))
    return 0


def _provider(argv: list[str]) -> int:
    if not argv or argv[0] != "serve":
        print("usage: python -m kit provider serve [--port N] [--profile NAME] …", file=sys.stderr)
        return 2
    from kit.provider import cli

    return cli.main(argv[1:]) or 0


def _parse(argv: list[str]) -> int:
    from kit.transcripts import cli

    return cli.main(argv) or 0


def _ping(argv: list[str]) -> int:
    from kit import ping

    return ping.main(argv)


COMMANDS = {"batch": _batch, "provider": _provider, "parse": _parse, "ping": _ping}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: python -m kit {{{','.join(COMMANDS)}}} …", file=sys.stderr)
        return 2
    return COMMANDS[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
