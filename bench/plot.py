"""Figures for docs/performance.md from the JSON that the benchmarks write.

    .venv/bin/python bench/plot.py                      # whichever of out/loadtest.json, out/bench-e2e.json exist
    .venv/bin/python bench/plot.py --loadtest out/loadtest.json --e2e out/bench-e2e.json --out docs/img

``make loadtest`` and ``make bench-e2e`` run it after the benchmark. Needs matplotlib (the ``bench``
optional dependencies: ``.venv/bin/pip install -e '.[bench]'``).

Figures (PNG):

- ``loadtest-latency.png``: p50 / p90 / p99 / max filter latency at each fixed rate and timed replay,
  with the 5 ms p99 floor;
- ``loadtest-percentiles.png``: the full latency percentile spectrum of every run;
- ``e2e-backlog.png``, ``e2e-arrival.png``, ``e2e-paced.png``, ``e2e-contention.png``: pods bound over
  time in each phase of the end-to-end benchmark, per configuration;
- ``e2e-gang-latency.png``, ``e2e-gang-latency-paced.png``: distribution of gang latency in the arrival
  and paced phases.

``--prefix`` replaces ``e2e`` in those names, so a run for one section does not redraw another's figures.

- ``gang-perf.png`` (``--gang-perf out/bench-gang-perf.json``, ``make bench-gang-perf``): gang durations
  per shape and configuration of upstream's gang benchmark.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
COLORS = {"ceiling": "#7f7f7f", "gang-extender": "#1f77b4", "in-tree": "#ff7f0e", "noop-extender": "#2ca02c"}


def _plt() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise SystemExit("matplotlib is missing: .venv/bin/pip install -e '.[bench]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"figure.dpi": 110, "font.size": 9, "axes.grid": True, "grid.alpha": 0.3})
    return plt


def percentile(ordered: list[float], q: float) -> float:
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def loadtest(data: dict[str, Any], out: Path) -> list[Path]:
    plt = _plt()
    runs = [r for r in data["runs"] if r["mode"] in ("open loop", "timed")]
    written = []
    if runs:
        fig, ax = plt.subplots(figsize=(7.5, 3.6))
        labels = [r["target"].split(" (")[0].split(", ")[0] for r in runs]
        x = list(range(len(runs)))
        for key, marker in (("p50", "o"), ("p90", "s"), ("p99", "^"), ("max", "x")):
            ax.plot(x, [r["lat_ms"][key] for r in runs], marker=marker, label=key)
        ax.axhline(5.0, color="red", linestyle="--", linewidth=1, label="p99 floor 5 ms")
        ax.set_xticks(x, [f"{label}\n{r['throughput']:,.0f}/s" for label, r in zip(labels, runs, strict=True)])
        ax.set_yscale("log")
        ax.set_ylabel("filter latency, ms (log)")
        ax.set_title("Replay of recorded kube-scheduler filter calls, 1,000 nodes (wrk, corrected for "
                     "coordinated omission)", fontsize=9)
        ax.legend(fontsize=8, ncol=5, loc="upper left")
        fig.tight_layout()
        written.append(_save(fig, out / "loadtest-latency.png"))
    spectrum = [r for r in data["runs"] if r.get("samples")]
    if spectrum:
        fig, ax = plt.subplots(figsize=(7.5, 3.8))
        qs = [0, 50, 75, 90, 95, 99, 99.5, 99.9, 99.95, 99.99]
        for r in spectrum:
            ordered = sorted(r["samples"])
            xs = [q for q in qs if len(ordered) * (1 - q / 100) >= 1 or q == 0]
            ax.plot([1 / (1 - q / 100) for q in xs], [percentile(ordered, max(q, 0.0001)) for q in xs],
                    marker=".", label=f"{r['mode']} {r['target']}")
        ax.axhline(5.0, color="red", linestyle="--", linewidth=1)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ticks = [q for q in qs if q <= 99.9]
        ax.set_xticks([1 / (1 - q / 100) for q in ticks], [f"p{q:g}" for q in ticks])
        ax.set_ylabel("latency, ms (log)")
        ax.set_title("Latency percentile spectrum per run", fontsize=9)
        ax.legend(fontsize=7, loc="upper left")
        fig.tight_layout()
        written.append(_save(fig, out / "loadtest-percentiles.png"))
    return written


def _color(r: dict[str, Any]) -> Any:
    kind = r.get("kind", r["config"])
    variant = r["config"] != kind
    return COLORS.get(kind, "#2ca02c") if not variant else "#17becf"


def e2e(data: dict[str, Any], out: Path, prefix: str = "e2e") -> list[Path]:
    plt = _plt()
    results = data["results"]
    written = []
    titles = {
        "backlog": "Backlog: 2,000 pods pending when kube-scheduler starts; pods bound over time",
        "arrival": "Arrival: gangs created while kube-scheduler runs; pods bound over time",
        "paced": "Paced: gangs created at a fixed rate, the same for every configuration; pods bound over time",
        "contention": "Contention: 6 gangs of 8 for room for 2; pods bound over time (stay counted after the "
                      "gang finished)",
    }
    for phase, title in titles.items():
        if not any(phase in r for r in results):
            continue
        fig, ax = plt.subplots(figsize=(7.5, 3.4))
        for r in (r for r in results if phase in r):
            p = r[phase]
            timeline = p["timeline"]
            label = (f"{r['config']} ({p['completed_gangs']}/{p['gangs']} gangs)" if phase == "contention"
                     else f"{r['config']} ({p['pods_per_second']:.0f} pods/s)")
            ax.step([0, *timeline], list(range(len(timeline) + 1)), where="post", color=_color(r), label=label)
        ax.set_xlabel("seconds since the scheduler started" if phase == "backlog"
                      else "seconds since the first pod was created")
        ax.set_ylabel("pods bound")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=8)
        fig.tight_layout()
        written.append(_save(fig, out / f"{prefix}-{phase}.png"))
    for phase, suffix in (("arrival", ""), ("paced", "-paced")):
        if not any(phase in r for r in results):
            continue
        fig, ax = plt.subplots(figsize=(7.5, 3.4))
        for r in (r for r in results if phase in r):
            lat = sorted(r[phase]["gang_latency"])
            if lat:
                ax.plot(lat, [(i + 1) / len(lat) for i in range(len(lat))], color=_color(r),
                        label=f"{r['config']}{' (groups of 8, no gangs)' if r.get('kind') == 'ceiling' else ''}")
        ax.set_xlabel("gang latency, s (last member created -> whole gang bound)")
        ax.set_ylabel("fraction of gangs")
        ax.set_title(f"Gang latency, {phase} phase", fontsize=9)
        ax.legend(fontsize=8)
        fig.tight_layout()
        written.append(_save(fig, out / f"{prefix}-gang-latency{suffix}.png"))
    return written


def gang_perf(data: dict[str, Any], out: Path, prefix: str = "gang-perf") -> list[Path]:
    """One figure per run of ``bench/gang_perf.py``: each shape's gang durations (first member created
    -> the minCount-th bound), one curve per configuration."""
    plt = _plt()
    results = data["results"]
    shapes = list(dict.fromkeys(r["workload"] for r in results))
    columns = min(3, len(shapes))
    rows = -(-len(shapes) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(3.4 * columns, 3.0 * rows), squeeze=False)
    for ax in axes.flat[len(shapes):]:
        ax.set_visible(False)
    for ax, shape in zip(axes.flat, shapes, strict=False):
        for r in (r for r in results if r["workload"] == shape):
            durations = sorted(r["gang_seconds"])
            if durations:
                ax.plot(durations, [(i + 1) / len(durations) for i in range(len(durations))], color=_color(r),
                        label=f"{r['config']} ({r['pods_per_second']:.0f} pods/s)")
        ax.set_title(shape.replace("5000Nodes_", "").replace("_", " "), fontsize=8)
        ax.set_xlabel("gang duration, s", fontsize=8)
        ax.legend(fontsize=7)
    for row in axes:
        row[0].set_ylabel("fraction of gangs")
    fig.suptitle("Upstream's gang benchmark at 5,000 nodes: first member created -> gang bound", fontsize=9)
    fig.tight_layout()
    return [_save(fig, out / f"{prefix}.png")]


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, metadata={"Software": None})
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loadtest", type=Path, default=ROOT / "out" / "loadtest.json")
    parser.add_argument("--e2e", type=Path, default=ROOT / "out" / "bench-e2e.json")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    parser.add_argument("--gang-perf", type=Path, default=ROOT / "out" / "bench-gang-perf.json")
    parser.add_argument("--only", choices=("loadtest", "e2e", "gang-perf"), help="plot only one of them")
    parser.add_argument("--prefix", default="e2e", help="file name prefix of the end-to-end figures [e2e]")
    args = parser.parse_args(argv)
    written: list[Path] = []
    if args.only in (None, "loadtest") and args.loadtest.exists():
        written += loadtest(json.loads(args.loadtest.read_text()), args.out)
    if args.only in (None, "e2e") and args.e2e.exists():
        written += e2e(json.loads(args.e2e.read_text()), args.out, args.prefix)
    if args.only in (None, "gang-perf") and args.gang_perf.exists():
        written += gang_perf(json.loads(args.gang_perf.read_text()), args.out,
                             "gang-perf" if args.prefix == "e2e" else args.prefix)
    if not written:
        print("nothing to plot: run `make loadtest` or `make bench-e2e` first", file=sys.stderr)
        return 1
    for path in written:
        print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
