"""Smoke test of the replay load-test tooling (bench/loadtest.py, bench/replay.lua, tests/data/corpus).

Runs in a few seconds against a real ``gang-extender serve --cluster-snapshot`` subprocess: the corpus
loads and matches its snapshot, the first requests replayed in recorded order (binds included) get
exactly the recorded replies, and wrk drives the Lua script at a fixed rate and in a closed loop with
zero errors. The numbers themselves are not checked: this only keeps the tooling from rotting.
"""

from __future__ import annotations

import shutil
import sys
from collections import Counter
from pathlib import Path

import orjson
import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import loadtest  # noqa: E402


@pytest.fixture(scope="module")
def corpus() -> loadtest.Corpus:
    return loadtest.load_corpus(loadtest.CORPUS)


@pytest.fixture
def snapshot(tmp_path: Path, corpus: loadtest.Corpus) -> Path:
    path = tmp_path / "snapshot.json"
    path.write_bytes(corpus.snapshot)
    return path


def test_corpus_is_complete_and_matches_its_snapshot(corpus: loadtest.Corpus) -> None:
    kinds = Counter(obj["kind"] for obj in orjson.loads(corpus.snapshot)["items"])
    assert kinds["Node"] >= 1000 and kinds["Pod"] > 0 and kinds["Workload"] > 0
    verbs = Counter(r["verb"] for r in corpus.records)
    assert verbs["filter"] >= 1000 and verbs["bind"] > 0
    assert all(r["status"] == 200 for r in corpus.records)
    names = {obj["metadata"]["name"] for obj in orjson.loads(corpus.snapshot)["items"] if obj["kind"] == "Node"}
    assert all(set(r["request"]["NodeNames"]) <= names for r in corpus.records if r["verb"] == "filter")
    assert corpus.meta["kubernetes"].startswith("v1.35")


def test_replay_in_order_gives_the_recorded_replies(corpus: loadtest.Corpus, snapshot: Path, tmp_path: Path) -> None:
    result = loadtest.verify(corpus, tmp_path, snapshot, with_binds=True, limit=400)
    for verb in ("filter", "prioritize"):
        outcomes = result["outcomes"][verb]
        assert set(outcomes) == {"exact"}, (verb, outcomes, result["examples"])


@pytest.mark.skipif(shutil.which("wrk") is None,
                    reason="WRK NOT INSTALLED: the wrk half of the load-test smoke test did not run "
                           "(apt-get install -y wrk; `make loadtest` installs it)")
def test_wrk_replays_at_a_fixed_rate_and_closed_loop(corpus: loadtest.Corpus, snapshot: Path, tmp_path: Path) -> None:
    records = corpus.of(["filter"])
    bodies = tmp_path / "bodies.txt"
    loadtest.write_bodies(bodies, records)
    with loadtest.server(snapshot, tmp_path) as srv:
        paced = loadtest.run_wrk(srv, bodies, tmp_path, connections=2, rate=200, seconds=1, records=records,
                                 label="smoke rate")
        closed = loadtest.run_wrk(srv, bodies, tmp_path, connections=1, rate=0, seconds=1, records=records,
                                  label="smoke closed")
    for run in (paced, closed):
        assert run.errors == 0, run.first_error
        assert run.replies > 50
        assert run.lat_ms["p50"] > 0
        assert run.cache["hits"] > 0  # /metrics read before and after the run
    assert 100 <= paced.throughput <= 300  # paced near the asked 200/s, not flat out
