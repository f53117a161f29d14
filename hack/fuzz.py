#!/usr/bin/env python3
"""``make fuzz``: hostile input against a live ``gang-extender serve --cluster-snapshot`` (gunicorn).

1. Starts the extender exactly as users do, over the fuzz snapshot of tests/http/fuzzing.py, with
   gunicorn's access log on (``--log-level DEBUG``) so every response status is on record.
2. Runs tests/http/test_fuzz.py against it (hypothesis: raw bytes, arbitrary JSON, mutated valid
   requests, binds for known/unknown/bound pods, enormous and deeply nested bodies), ``--examples``
   generated bodies per verb.
3. Runs schemathesis against docs/openapi.yaml, ``--examples`` cases per operation, positive and
   negative, every check (see ``SCHEMATHESIS_RUNS`` for the one exception and why).
4. Reports the figures from the server's side: requests per verb, status codes (5xx must be 0),
   requests slower than 5 s, internal errors, worker (re)starts, whether the process is still up.
   Exit status 1 if any figure is wrong or a phase failed.

Usage: .venv/bin/python hack/fuzz.py [--examples 10000] [--json figures.json] [--keep]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "hack"))

from controlplane import free_ports, tail, wait_for  # noqa: E402

from tests.http.fuzzing import snapshot_document  # noqa: E402

BIN = Path(sys.executable).parent
ACCESS = re.compile(r'"([A-Z]+) (\S+) HTTP/[\d.]+" (\d{3}) ')
# (name, extra schemathesis arguments). negative_data_rejection ("a body that violates the schema must
# get a 4xx") cannot hold for /filter: a Nodes item whose name the mirror already knows is not parsed
# again (the mirror's copy wins), so a malformed copy of a known node is accepted. /filter runs every
# other check; its wrong-type rejections are covered by tests/http (test_routes.py, test_fuzz.py).
SCHEMATHESIS_RUNS = [
    ("schemathesis (all operations but /filter, all checks)", ["--exclude-operation-id", "filter"]),
    ("schemathesis (/filter, all checks but negative_data_rejection)",
     ["--include-operation-id", "filter", "--exclude-checks", "negative_data_rejection"]),
]


def log(message: str) -> None:
    print(f"[fuzz] {message}", file=sys.stderr, flush=True)


def start_server(workdir: Path, port: int) -> subprocess.Popen[bytes]:
    snapshot = workdir / "snapshot.json"
    snapshot.write_text(json.dumps(snapshot_document()))
    out = (workdir / "server.log").open("wb")
    proc = subprocess.Popen(
        [str(BIN / "gang-extender"), "serve", "--cluster-snapshot", str(snapshot), "--port", str(port),
         "--gang-timeout-seconds", "0.2", "--gang-backoff-seconds", "0", "--log-level", "DEBUG",
         # the full Nodes form is fuzzed too (off by default), with the caps tests/http/test_fuzz.py uses
         "--max-full-nodes-body-bytes", str(64 * 2**20), "--request-buffer-bytes", str(64 * 2**20)],
        stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def ready() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"gang-extender exited with {proc.returncode}:\n{tail(workdir / 'server.log')}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as reply:
                return bool(reply.status == 200)
        except OSError:
            return False

    wait_for(ready, timeout=30, what="gang-extender /readyz")
    return proc


def run_phase(name: str, argv: list[str], env: dict[str, str], workdir: Path) -> dict[str, Any]:
    log(f"{name}: {' '.join(argv)}")
    started = time.monotonic()
    log_path = workdir / f"phase-{re.sub(r'[^a-z]+', '-', name.lower()).strip('-')}.log"
    with log_path.open("wb") as out:
        code = subprocess.call(argv, env=env, cwd=workdir, stdout=out, stderr=subprocess.STDOUT)
    seconds = time.monotonic() - started
    text = log_path.read_text(errors="replace")
    summary = [line for line in text.splitlines()[-40:] if re.search(r"passed|failed|generated|error", line)]
    log(f"{name}: exit {code} in {seconds:.0f}s; " + " | ".join(s.strip() for s in summary[-3:]))
    return {"phase": name, "exit": code, "seconds": round(seconds, 1), "log": str(log_path), "summary": summary}


def metrics(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return values


def figures(port: int, proc: subprocess.Popen[bytes], workdir: Path) -> dict[str, Any]:
    server_log = (workdir / "server.log").read_text(errors="replace")
    statuses: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for method, path, status in ACCESS.findall(server_log):
        statuses[f"{method} {path.split('?')[0]}"][status] += 1
    alive = proc.poll() is None
    values = metrics(port) if alive else {}
    per_verb = {verb: int(sum(v for k, v in values.items()
                              if k.startswith("gang_extender_requests_total{") and f'verb="{verb}"' in k))
                for verb in ("filter", "prioritize", "bind")}
    internal = int(sum(v for k, v in values.items()
                       if k.startswith("gang_extender_requests_total{") and 'outcome="error"' in k))
    slow = 0
    for verb in per_verb:
        total = values.get(f'gang_extender_request_seconds_bucket{{le="+Inf",verb="{verb}"}}', 0)
        fast = values.get(f'gang_extender_request_seconds_bucket{{le="5.0",verb="{verb}"}}', 0)
        slow += int(total - fast)
    all_statuses = collections.Counter[str]()
    for counter in statuses.values():
        all_statuses.update(counter)
    return {
        "bodies_per_verb": per_verb,
        "status_codes": dict(sorted(all_statuses.items())),
        "status_codes_by_route": {k: dict(sorted(v.items())) for k, v in sorted(statuses.items())},
        "responses_5xx": sum(n for s, n in all_statuses.items() if s.startswith("5")),
        "internal_errors": internal,
        "slower_than_5s": slow,
        "worker_boots": server_log.count("Booting worker with pid"),
        "tracebacks_in_log": server_log.count("Traceback (most recent call last)"),
        "process_alive": alive,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--examples", type=int, default=10_000, help="generated bodies per verb and phase")
    parser.add_argument("--skip-hypothesis", action="store_true")
    parser.add_argument("--skip-schemathesis", action="store_true")
    parser.add_argument("--schemathesis-runs", default="0,1",
                        help="which SCHEMATHESIS_RUNS to do: 0 = all operations but /filter, 1 = /filter")
    parser.add_argument("--workers", default="2", help="schemathesis workers")
    parser.add_argument("--seed", default="1")
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    args = parser.parse_args(argv)
    if not args.skip_schemathesis and shutil.which("schemathesis", path=str(BIN)) is None:
        log("schemathesis is not installed: .venv/bin/pip install -e '.[fuzz]'")
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="gang-fuzz-"))
    port = free_ports(1)[0]
    url = f"http://127.0.0.1:{port}"
    proc = start_server(workdir, port)
    log(f"gang-extender serve (gunicorn) on {url}, work directory {workdir}")
    phases = []
    started = time.monotonic()
    try:
        env = {**os.environ, "GANG_FUZZ_URL": url, "GANG_FUZZ_EXAMPLES": str(args.examples),
               "PYTHONPATH": str(ROOT)}
        if not args.skip_hypothesis:
            phases.append(run_phase("hypothesis", [str(BIN / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                                   "--rootdir", str(ROOT), str(ROOT / "tests/http/test_fuzz.py")],
                                    env, workdir))
        if not args.skip_schemathesis:
            for index, (name, extra) in enumerate(SCHEMATHESIS_RUNS):
                if str(index) not in args.schemathesis_runs.split(","):
                    continue
                phases.append(run_phase(name, [
                    str(BIN / "schemathesis"), "run", str(ROOT / "docs/openapi.yaml"), "--url", url,
                    "--max-examples", str(args.examples), "--checks", "all", "--request-timeout", "10",
                    "--workers", args.workers, "--seed", args.seed, "--suppress-health-check", "all",
                    "--continue-on-failure", *extra], env, workdir))
        result = {"examples_per_verb_and_phase": args.examples, "seconds": round(time.monotonic() - started),
                  "phases": phases, **figures(port, proc, workdir)}
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(30)
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    ok = (all(p["exit"] == 0 for p in phases) and result["responses_5xx"] == 0 and result["internal_errors"] == 0
          and result["slower_than_5s"] == 0 and result["worker_boots"] == 1 and result["process_alive"]
          and result["tracebacks_in_log"] == 0)
    if ok and not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        log(f"logs kept in {workdir}")
    log("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
