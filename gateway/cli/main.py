"""The ``sieve`` command: serve | prune | replay.

    sieve serve [--host 127.0.0.1] [--port 8080] [--config FILE]
    sieve prune REQUEST.json|- [--format chat|messages|responses] [--target N] [--strategy S] [--policy NAME]
    sieve replay LOGS.jsonl [--policy NAME] [--target N]
        (LOGS: recorded requests, pruned offline; or a shadow policy's audit log, summed as it is)
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path
from typing import Any

from gateway.errors import ConfigError
from gateway.config import Settings, prepare_offline_environment


def main(argv: list[str] | None = None) -> int:
    prepare_offline_environment()
    parser = argparse.ArgumentParser(prog="sieve", description="Sieve: a context-pruning gateway for LLM agents.")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the gateway")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--config", type=Path, help="YAML config (models, upstreams, keys, budgets)")
    serve.add_argument("--allow-open", action="store_true",
                       help="allow a gateway without virtual keys on a non-loopback address")
    prune = sub.add_parser("prune", help="print the pruned request and report for a request body")
    prune.add_argument("file", help="the request body (JSON); - reads standard input")
    prune.add_argument("--format", choices=("chat", "messages", "responses"), default=None,
                       help="the body's wire format (the pruned body is printed in it); by default read from "
                            "the body, which must then show one format only")
    prune.add_argument("--target", type=_positive_int, help="the target in tokens (a positive integer)")
    prune.add_argument("--strategy", choices=("none", "window", "relevance"))
    prune.add_argument("--policy", default=None)
    replay = sub.add_parser("replay", help="estimate savings from recorded requests (JSON lines), or report "
                                           "a shadow-mode audit log's would-be savings")
    replay.add_argument("file", type=Path)
    replay.add_argument("--policy", default=None)
    replay.add_argument("--target", type=_positive_int)
    replay.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    try:
        if args.command == "serve":
            return _serve(args)
        if args.command == "prune":
            from gateway.cli.offline import prune_file  # noqa: PLC0415
            from gateway.wire import WireFormat  # noqa: PLC0415

            return prune_file(args.file, _settings(None), args.policy, args.target, args.strategy,
                              fmt=WireFormat(args.format) if args.format else None)
        from gateway.cli.offline import replay_file  # noqa: PLC0415

        return replay_file(args.file, _settings(None), args.policy, args.target, not args.no_progress)
    except ConfigError as exc:
        print(f"sieve: configuration error: {exc}", file=sys.stderr)
        return 2


def _positive_int(text: str) -> int:
    """A target as x-sieve-target-tokens takes it: a positive integer (else argparse's one-line error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def _settings(args: argparse.Namespace | None) -> Settings:
    overrides = {}
    if args is not None:
        if args.host:
            overrides["host"] = args.host
        if args.port:
            overrides["port"] = args.port
        if args.config:
            overrides["config_path"] = args.config
        if args.allow_open:
            overrides["allow_open"] = True
    return Settings.from_env(**overrides)


def _serve(args: argparse.Namespace) -> int:
    import uvicorn  # noqa: PLC0415

    from gateway.api import create_app, uvicorn_config  # noqa: PLC0415
    from gateway.auth import is_open  # noqa: PLC0415
    from gateway.api import check_config  # noqa: PLC0415
    from gateway.telemetry import access_lines_to  # noqa: PLC0415

    settings = _settings(args)
    check_config(settings)  # a ConfigError is one line (main), not a failed lifespan's traceback
    if is_open(settings) and not settings.bind_is_loopback and not settings.allow_open:
        print(f"sieve: refusing to listen on {settings.host} (only a literal loopback address or localhost "
              "counts as loopback): no virtual keys are configured, so anyone "
              "who can reach this address could spend your provider keys. Configure keys "
              "(SIEVE_KEYS_FILE or `keys:` in the config), or pass --allow-open / SIEVE_ALLOW_OPEN=1 "
              "if a network policy protects the gateway.", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s",
                        stream=sys.stderr)
    access_lines_to(sys.stdout)  # JSON lines alone on stdout; every other record on stderr
    for warning in settings.startup_warnings():
        logging.getLogger("sieve").warning(warning)
    # On SIGTERM/SIGINT uvicorn closes the listening socket, lets open responses run for
    # up to the grace period, cancels what is left, then runs the app's lifespan shutdown
    # (Services.stop: accounting flushed, clients closed).
    server = uvicorn.Server(uvicorn_config(create_app(settings), settings))
    _exit_cleanly_on_signals(server)
    server.run()
    return 0 if server.started else 3  # uvicorn's own status for an app that never started


def _exit_cleanly_on_signals(server: Any) -> None:
    """After its graceful shutdown uvicorn re-raises the signal it caught, under the handler
    that was there before it; with the default one a drained SIGTERM ends as "killed by
    signal" (status 143), which supervisors and CI read as a crash. This handler makes it a
    plain return (exit 0). Installed before uvicorn takes over, it also turns a signal that
    arrives during start-up into a normal shutdown instead of an abrupt death."""

    def stop(signum: int, frame: object) -> None:
        server.should_exit = True

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)

