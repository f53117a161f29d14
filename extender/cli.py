"""Command line: ``gang-extender serve`` (and, later, more subcommands).

Owns: argument parsing, logging setup, turning invalid settings into one message and exit code 2,
and running gunicorn with exactly one gthread worker (gang state, the mirror and held binds must live
in one process; see docs/decisions/0001-one-worker.md). Must not: contain extender logic.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import Any

from extender import config


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gang-extender",
                                     description="kube-scheduler extender for gang scheduling")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve the extender verbs over HTTP (gunicorn, one worker)")
    config.add_arguments(serve)
    return parser


def _setup_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def serve(settings: config.Settings) -> None:
    from gunicorn.app.base import BaseApplication

    from extender.app import create_app

    class _Gunicorn(BaseApplication):  # type: ignore[misc]
        def load_config(self) -> None:
            options: dict[str, Any] = {
                "bind": f"{settings.host}:{settings.port}",
                "workers": 1,                 # never more: see docs/decisions/0001-one-worker.md
                "worker_class": "gthread",
                "threads": settings.threads,  # each held bind occupies a thread
                "timeout": 120,
                "graceful_timeout": 10,
                "keepalive": 75,              # kube-scheduler reuses its connections
                "preload_app": False,         # create_app (and watch threads) run in the worker
                "accesslog": "-" if settings.log_level.upper() == "DEBUG" else None,
                "loglevel": settings.log_level.lower(),
            }
            if "control_socket_disable" in self.cfg.settings:  # gunicorn >= 25
                # Its control socket can add workers at run time, which would break the one-worker rule.
                options["control_socket_disable"] = True
            for key, value in options.items():
                self.cfg.set(key, value)

        def load(self) -> Any:
            return create_app(settings)

    _Gunicorn().run()


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = config.load(vars(args))
    except config.ConfigError as exc:
        print(f"gang-extender: {exc}", file=sys.stderr)
        return 2
    _setup_logging(settings.log_level)
    if args.command == "serve":
        serve(settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
