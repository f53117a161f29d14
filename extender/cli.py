"""Command line: ``gang-extender serve`` and ``gang-extender explain`` (extender/explain.py).

Owns: argument parsing, logging setup, turning invalid settings (or TLS files gunicorn could not load)
into one message and exit code 2, then handing the settings to extender/http/server.py. Must not:
contain extender logic or import Flask or gunicorn.
"""

from __future__ import annotations

import argparse
import logging
import ssl
import sys
from collections.abc import Sequence

from extender import config, explain, native
from extender.errors import ConfigError
from extender.http import server


class _Version(argparse.Action):
    """``--version``: imports the hot-path modules only when asked (``explain`` needs none of them)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        print(f"gang-extender {native.package_version()} ({native.hot_path().summary()})")
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gang-extender",
                                     description="kube-scheduler extender for gang scheduling")
    parser.add_argument("--version", action=_Version, nargs=0, help="print the version and how the hot path runs")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve the extender verbs over HTTP (gunicorn, one worker)")
    config.add_arguments(serve)
    explain.add_parser(commands)
    return parser


def _setup_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def tls_problems(settings: config.Settings) -> list[str]:
    """Load the TLS files as gunicorn will, so a bad pair fails here (exit 2), not in the worker."""
    if not settings.tls_cert_file:
        return []
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    problems = []
    try:
        context.load_cert_chain(settings.tls_cert_file, settings.tls_key_file)
    except (ssl.SSLError, OSError) as exc:
        problems.append(f"tls-cert-file/tls-key-file: cannot load the certificate and key: {exc}")
    if settings.tls_client_ca_file:
        try:
            context.load_verify_locations(cafile=settings.tls_client_ca_file)
        except (ssl.SSLError, OSError) as exc:
            problems.append(f"tls-client-ca-file: cannot load CA certificates: {exc}")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "explain":  # a client of a running extender: the server's settings do not apply
        return explain.run(args)
    try:
        settings = config.load(vars(args))
    except ConfigError as exc:
        print(f"gang-extender: {exc}", file=sys.stderr)
        return 2
    problems = tls_problems(settings) if args.command == "serve" else []
    if problems:
        print(f"gang-extender: {ConfigError(problems)}", file=sys.stderr)
        return 2
    _setup_logging(settings.log_level)
    if args.command == "serve":
        server.serve(settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
