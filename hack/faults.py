#!/usr/bin/env python3
"""``make faults``: the long fault runs against a real control plane, with figures.

Starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler 1.35 (hack/controlplane.py)
and ``gang-extender serve`` (tests/e2e/support.py), then runs the scenarios of tests/e2e/faults.py:

- ``--kills`` (default 25) kill -9 of the extender at random moments while gangs schedule;
- ``--mid-release-kills`` (default 20) kill -9 aimed inside a gang's release (the extender binding one
  member at a time, killed when the first member shows up bound);
- ``--restarts`` (default 3) kube-apiserver SIGKILL + restart while gangs wait;
- one binding refused by a ValidatingAdmissionPolicy at quorum.

Prints the figures as JSON (also to ``--json FILE``); exit status 1 if any invariant is broken.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "hack", ROOT / "tests" / "e2e"):
    sys.path.insert(0, str(path))

from controlplane import ControlPlane, find_bin_dir  # noqa: E402
from faults import apiserver_restart, bind_refused_mid_gang, kill_during_gangs, kill_mid_release  # noqa: E402
from support import Extender, scheduler_config  # noqa: E402


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def whole(figures: dict[str, Any]) -> bool:
    return (figures["pods_not_bound"] == 0 and figures["gangs_bound_whole"] == figures["gangs"]
            and not figures["partial_gangs"] and not figures["double_bindings"] and not figures["lost_bindings"]
            and not figures["overcommitted_nodes"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--kills", type=int, default=25)
    parser.add_argument("--mid-release-kills", type=int, default=20,
                        help="rounds of kill -9 aimed inside a release (see tests/e2e/faults.py)")
    parser.add_argument("--restarts", type=int, default=3)
    parser.add_argument("--without-release-journal", action="store_true",
                        help="run the extender without --release-journal (to compare)")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument("--keep", action="store_true", help="keep the control plane's and the extender's files")
    args = parser.parse_args(argv)
    started = time.monotonic()
    result: dict[str, Any] = {}
    with ControlPlane(find_bin_dir(), log=log, keep=args.keep) as cp:
        tmp = cp.workdir / "extender"
        tmp.mkdir()
        ext = Extender(cp.kubeconfig, tmp, log=log,
                       args=["--gang-timeout-seconds", "12", "--gang-backoff-seconds", "2"])
        if args.without_release_journal:
            at = ext.args.index("--release-journal")
            del ext.args[at:at + 2]
        ext.start()
        cp.start_scheduler(scheduler_config(ext.url))
        try:
            if args.kills:
                result["kill_9"] = kill_during_gangs(cp, ext, "faults-kill", kills=args.kills, seed=args.seed, log=log,
                                                     nodes=max(12, args.kills))
            if args.mid_release_kills:
                result["kill_mid_release"] = kill_mid_release(cp, ext, "faults-cut", rounds=args.mid_release_kills,
                                                              log=log)
            if args.restarts:
                result["apiserver_restart"] = apiserver_restart(cp, ext, "faults-restart", restarts=args.restarts,
                                                                log=log)
            result["bind_refused"] = bind_refused_mid_gang(cp, ext, "faults-refused", log=log)
        finally:
            cp.stop_scheduler()
            ext.stop()
    result["seconds"] = round(time.monotonic() - started)
    ok = True
    if "kill_9" in result:  # partial: > 2 s partly bound while the extender was up (docs/reliability.md)
        ok &= whole(result["kill_9"])
    if "kill_mid_release" in result:
        ok &= whole(result["kill_mid_release"])
    if "apiserver_restart" in result:
        restart = result["apiserver_restart"]
        ok &= whole(restart) and all(o["readyz_503_while_down"] > 0 and o["readyz_200_while_down_after_first_503"] == 0
                                     and o["readyz_not_200_after_recovery"] == 0 for o in restart["outages"])
    refused = result["bind_refused"]
    ok &= (refused["members_bound_at_the_end"] == 4 and refused["gang_bind_failed_events"] >= 1
           and refused["bind_errors_metric"] >= 1 and not refused["pods_on_two_nodes"])
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    log("[faults] PASS" if ok else "[faults] FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
