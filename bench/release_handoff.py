#!/usr/bin/env python3
"""What a released gang's hand-off to the bind pool costs, per member, in CPU (no HTTP, no API server).

A released quorum's members each wait on a thread of their own (the held binds: gunicorn's request
threads, which live on between requests). Until 51ce49b the releasing request handed each member's
Binding to a ``gang-bind`` pool and, when all were made, woke every held thread; since then each held
thread is woken to make its own Binding (``engine/binding.py``; the end-to-end comparison is in
docs/performance.md). This times both on long-lived threads, with a stand-in for the Binding's own work:

- ``pool``: the work goes through a ThreadPoolExecutor, then the held threads are woken (before 51ce49b);
- ``own thread``: the held threads are woken, each does its work, the last one reports (since).

    .venv/bin/python bench/release_handoff.py            # ~10 s
"""

from __future__ import annotations

import argparse
import threading
import time
from concurrent.futures import ThreadPoolExecutor


def binding_work(_: int) -> int:
    """A stand-in for the CPU of one Binding's request (small: the hand-off is what is measured)."""
    total = 0
    for k in range(200):
        total += k
    return total


class Held:
    """``count`` long-lived threads, each waiting for its member's turn like a held bind."""

    def __init__(self, count: int) -> None:
        self.go = [threading.Event() for _ in range(count)]
        self.work_first = False
        self.left = 0
        self.lock = threading.Lock()
        self.round_done = threading.Event()
        for i in range(count):
            threading.Thread(target=self._member, args=(i,), daemon=True).start()

    def _member(self, i: int) -> None:
        while True:
            self.go[i].wait()
            self.go[i].clear()
            if self.work_first:
                binding_work(i)
            with self.lock:
                self.left -= 1
                if not self.left:
                    self.round_done.set()

    def release(self, own_work: bool) -> None:
        """Wake every member (each does its own work first when ``own_work``) and wait for all."""
        self.work_first, self.left = own_work, len(self.go)
        self.round_done.clear()
        for event in self.go:
            event.set()
        self.round_done.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--members", type=int, default=8, help="gang size [8]")
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3, help="each shape this many times, interleaved [3]")
    args = parser.parse_args()
    bind_pool = ThreadPoolExecutor(32, thread_name_prefix="gang-bind")
    held = Held(args.members)

    def pool() -> None:
        list(bind_pool.map(binding_work, range(args.members)))
        held.release(own_work=False)

    def own_thread() -> None:
        held.release(own_work=True)

    shapes = {"pool": pool, "own thread": own_thread}
    results: dict[str, list[float]] = {name: [] for name in shapes}
    for _ in range(args.repeat):
        for name, shape in shapes.items():
            start = time.process_time()
            for _ in range(args.rounds):
                shape()
            results[name].append((time.process_time() - start) / args.rounds / args.members * 1e6)
    for name, runs in results.items():
        print(f"{name:>10}: CPU per member, best of {args.repeat}: {min(runs):5.1f} us "
              f"(runs {', '.join(f'{r:.1f}' for r in runs)})")
    print(f"the pool's hand-off: {min(results['pool']) - min(results['own thread']):+.1f} us per member")
    bind_pool.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
