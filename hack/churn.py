#!/usr/bin/env python3
"""``make churn``: the barrier under churn, minutes long, with figures (issue 26).

Starts etcd, kube-apiserver and kube-controller-manager 1.35 (hack/controlplane.py) and two pairs of
kube-scheduler + ``gang-extender serve``, both with leader election (the HA topology of tests/e2e/ha.py),
and runs ``churn_soak`` of tests/e2e/churn.py for ``--seconds``: a stream of gangs (annotations and
PodGroups, 2-6 members, some with a gated last member lifted later), members of gangs waiting at the
barrier deleted and re-created under their names, and the leading pair killed with SIGKILL every
``--kill-gap`` seconds after the previous takeover.

``--leases shipped`` (the default) runs both elections with the shipped Lease settings (gang-extender's
defaults, as manifests/ha and the chart run it: 15 s / 10 s / 2 s; kube-scheduler's defaults, which the
shipped configuration does not change: 15 s / 10 s / 2 s), so the takeover times are the ones a user
gets; ``--leases test`` uses tests/e2e/ha.py's 4 s Leases (more kills per minute).

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

from churn import LEASES, AuditedControlPlane, churn_soak, problems, summary  # noqa: E402
from controlplane import find_bin_dir  # noqa: E402


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=300.0, help="how long gangs arrive and churn (default 300)")
    parser.add_argument("--leases", choices=sorted(LEASES), default="shipped")
    parser.add_argument("--kill-gap", type=float, nargs=2, metavar=("MIN", "MAX"), default=None,
                        help="seconds from a takeover to the next kill (default 3 10 with test Leases, 5 20 shipped)")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--nodes", type=int, default=6, help="nodes of 4 cpu the pods are placed on")
    parser.add_argument("--interval", type=float, default=0.8, help="mean seconds between two new gangs or pods")
    parser.add_argument("--churn-interval", type=float, default=1.5,
                        help="mean seconds between two replacements of a waiting member")
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument("--keep", action="store_true", help="keep the control plane's and the extenders' files")
    args = parser.parse_args(argv)
    kill_gap = tuple(args.kill_gap) if args.kill_gap else ((3.0, 10.0) if args.leases == "test" else (5.0, 20.0))
    with AuditedControlPlane(find_bin_dir(), log=log, keep=args.keep) as cp:
        figures = churn_soak(cp, "churn", cp.workdir / "pairs", seconds=args.seconds, seed=args.seed, log=log,
                             leases=args.leases, kill_gap=kill_gap, nodes=args.nodes, interval=args.interval,
                             churn_interval=args.churn_interval)
        if args.keep:
            figures["workdir"] = str(cp.workdir)
    found = problems(figures)
    figures["problems"] = found
    print(json.dumps(figures, indent=2))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    log(f"[churn] {summary(figures)}")
    log("[churn] PASS" if not found else "[churn] FAIL:\n  " + "\n  ".join(found))
    return 0 if not found else 1


if __name__ == "__main__":
    sys.exit(main())
