#!/usr/bin/env python3
"""``make ha``: kill the leader of a highly available gang-scheduler, many times, with figures.

Starts etcd, kube-apiserver and kube-controller-manager 1.35 (hack/controlplane.py) and two pairs of
kube-scheduler + ``gang-extender serve``, both with leader election, and runs ``leader_kills`` of
tests/e2e/ha.py: ``--kills`` (default 24) kill -9 of the leading pair, every other one aimed inside a
gang's release, the killed pair restarted as the standby each time.

Prints the figures as JSON (also to ``--json FILE``); exit status 1 if any invariant is broken.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "hack", ROOT / "tests" / "e2e"):
    sys.path.insert(0, str(path))

from controlplane import ControlPlane, find_bin_dir  # noqa: E402
from ha import leader_kills, problems  # noqa: E402


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--kills", type=int, default=24)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--nodes", type=int, default=6, help="nodes of 4 cpu the pods are placed on")
    parser.add_argument("--without-extender-election", action="store_true",
                        help="run the extenders without --leader-election (to compare)")
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument("--keep", action="store_true", help="keep the control plane's and the extenders' files")
    args = parser.parse_args(argv)
    if args.kills < 1:
        parser.error("--kills must be at least 1")
    with ControlPlane(find_bin_dir(), log=log, keep=args.keep) as cp:
        figures = leader_kills(cp, "ha", cp.workdir / "pairs", kills=args.kills, seed=args.seed, log=log,
                               election=not args.without_extender_election, nodes=args.nodes)
    found = problems(figures)
    figures["problems"] = found
    print(json.dumps(figures, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    log("[ha] PASS" if not found else "[ha] FAIL:\n  " + "\n  ".join(found))
    return 0 if not found else 1


if __name__ == "__main__":
    sys.exit(main())
