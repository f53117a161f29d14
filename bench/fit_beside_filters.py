"""Does asking slow the verbs? kube-scheduler-shaped filters against a live extender at ``--nodes`` nodes,
alone, then while a tool asks ``POST /fit`` about a ``--members`` gang as often as the extender allows
(every ``--interval``, 0.5 s), then alone again (issue 28 item 3).

The extender is ``gang-extender serve --cluster-snapshot`` (gunicorn, the serving worker, as in
production) over ``--nodes`` nodes of 4 cpu / 32Gi, each running a pod of 2 cpu. The filter client posts
one pending pod naming ``--names`` nodes (kube-scheduler names about 10% of 5,000) on one kept-alive
connection, reading each reply. The asker posts a Workload of ``--members`` and a Job of that parallelism
(1 cpu each: it fits now) and reads the answer, every ``--interval`` seconds. Reported per phase: filters sent and
their latency p50 / p99 / max, and the fits answered and their latency; the ratio of the filters' p50
and p99 while asking to alone (the mean of the two alone phases). Exit status 1 when a filter failed.

Run: ``.venv/bin/python bench/fit_beside_filters.py`` (``--nodes 500 --members 100 --seconds 5`` for a
quick look). Results: docs/performance.md.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # last: a compiled tree on PYTHONPATH is the one imported
    sys.path.append(str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from fit_latency import job_file  # noqa: E402
from hostile_clients import SmallClient, percentiles  # noqa: E402

from tests.http.live import LiveServer  # noqa: E402


def snapshot(nodes: int) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    for i in range(nodes):
        name = f"r{i // 100}-n{i % 100}"
        resources = {"cpu": "4", "memory": "32Gi", "pods": "110"}
        items.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name, "example.com/rack": f"r{i // 100}"}},
            "status": {"allocatable": resources, "capacity": resources}})
        items.append({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": f"busy-{name}", "namespace": "default", "uid": f"busy-{name}"},
            "spec": {"nodeName": name, "containers": [{"name": "c", "image": "pause", "resources": {
                "requests": {"cpu": "2", "memory": "1Gi"}}}]}, "status": {"phase": "Running"}})
    return {"apiVersion": "v1", "kind": "List", "items": items}


def filter_body(nodes: int, names: int) -> bytes:
    pod = {"metadata": {"name": "web-9", "namespace": "default", "uid": "u9", "labels": {"app": "web"}},
           "spec": {"schedulerName": "default-scheduler", "containers": [{"name": "c", "image": "pause",
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}
    chosen = [f"r{i // 100}-n{i % 100}" for i in range(0, nodes, max(1, nodes // names))][:names]
    return json.dumps({"Pod": pod, "NodeNames": chosen}).encode()


class Asker:
    """``POST /fit`` on one connection, ``interval`` seconds after each answer, until stopped; latencies and
    verdicts."""

    def __init__(self, port: int, body: bytes, interval: float) -> None:
        self.port, self.body, self.interval = port, body, interval
        self.latencies: list[float] = []
        self.verdicts: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="asker", daemon=True)

    def _run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        while not self._stop.is_set():
            started = time.monotonic()
            conn.request("POST", "/fit?namespace=default", body=self.body, headers={"Content-Type": "application/json"})
            reply = conn.getresponse()
            answer = json.loads(reply.read())
            verdict = answer.get("verdict") or f"HTTP {reply.status}"
            self.verdicts[verdict] = self.verdicts.get(verdict, 0) + 1
            self.latencies.append(time.monotonic() - started)
            self._stop.wait(self.interval + 0.01)  # the extender counts its interval from the last answer
        conn.close()

    def __enter__(self) -> Asker:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(120)


def measure(live: LiveServer, args: argparse.Namespace, fit_body: bytes, results: dict[str, Any]) -> int:
    """The three phases; the filters that failed."""
    failed = 0
    body = filter_body(args.nodes, args.names)
    SmallClient(live.port, body, deadline=5.0).run_for(2.0)  # warm up
    for phase in ("alone", "asking", "alone again"):
        client = SmallClient(live.port, body, deadline=5.0)
        if phase == "asking":
            with Asker(live.port, fit_body, args.interval) as asker:
                client.run_for(args.seconds)
            results["phases"][phase] = {"filters": client.sent, **percentiles(client.latencies),
                                        "fits": len(asker.latencies), "fit": percentiles(asker.latencies),
                                        "verdicts": asker.verdicts}
        else:
            client.run_for(args.seconds)
            results["phases"][phase] = {"filters": client.sent, **percentiles(client.latencies)}
        failed += sum(client.errors.values())
        print(f"[fit-beside] {phase}: {json.dumps(results['phases'][phase])}", file=sys.stderr, flush=True)
    return failed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--members", type=int, default=1000)
    p.add_argument("--names", type=int, default=500, help="node names per filter [500]")
    p.add_argument("--seconds", type=float, default=20.0, help="length of each phase [20]")
    p.add_argument("--interval", type=float, default=0.5,
                   help="seconds between an answer and the next question (the extender refuses sooner) [0.5]")
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args(argv)
    docs = job_file(args.members, "1", False).replace("namespace: fit-bench", "namespace: default")
    import yaml  # the Job file is YAML; /fit takes JSON
    fit_body = json.dumps(list(yaml.safe_load_all(docs))).encode()
    results: dict[str, Any] = {"nodes": args.nodes, "members": args.members, "names": args.names, "phases": {}}
    with tempfile.TemporaryDirectory(prefix="fit-beside-") as tmp:
        live = LiveServer(Path(tmp), snapshot(args.nodes))
        try:
            live.start(timeout=300)  # a 5,000-node snapshot takes longer to load than __enter__ waits
            failed = measure(live, args, fit_body, results)
        finally:
            live.stop()
    alone = [results["phases"][k] for k in ("alone", "alone again")]

    asking = results["phases"]["asking"]
    for q in ("p50_ms", "p99_ms"):
        base = sum(a[q] for a in alone) / 2
        results[f"{q}_ratio"] = round(asking[q] / base, 2) if base else None
    results["filter_errors"] = failed
    print(json.dumps(results, indent=2))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
