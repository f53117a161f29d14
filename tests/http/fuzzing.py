"""Hostile-input generators and the checks every reply must pass, shared by the fuzz tests
(tests/http/test_fuzz.py, against the Flask app or a live server) and ``make fuzz`` (hack/fuzz.py).

The bodies come in four families, each drawn by hypothesis:

- raw bytes: arbitrary bytes, truncated or spliced valid JSON, invalid UTF-8, lone surrogates, NaN;
- arbitrary JSON documents (nulls, wrong types, unicode keys, deep nesting);
- *mutated valid requests*: a valid filter/prioritize/bind body in which random fields are dropped,
  set to null, to a value of the wrong type, to unicode, to huge numbers, or nested deeply;
- targeted requests: names in and not in the mirror, bound and unbound pods, gang members, enormous
  node lists.

``check_reply`` is the contract: only 200, 400 or 413; every 4xx is a JSON object with a non-empty
``error`` string; every 200 has the verb's protocol shape and names only nodes of the request.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import orjson
from hypothesis import strategies as st

VERBS = ("filter", "prioritize", "bind", "preempt")
NODE_NAMES = [f"node-{i}" for i in range(1, 7)]
WORKLOAD_REF = {"name": "training", "podGroup": "workers"}
HOSTILE_TEXT = st.text(st.characters(codec="utf-8"), max_size=20) | st.sampled_from(
    ["", " ", "\x00", "\u202e", "\ufeff", "😀" * 50, "a" * 5000, "../../etc/passwd", "%s%n", "null", "1e999999",
     "-1", "0x10", "1Gi\n", "${jndi:x}", "\\", '"', "node-1\x00"])


# ------------------------------------------------------------------------------------ snapshot
def _node(name: str, cpu: str = "4", memory: str = "16Gi", **extra: Any) -> dict[str, Any]:
    resources = {"cpu": cpu, "memory": memory, "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "zone": name[-1]}},
            "spec": extra, "status": {"allocatable": dict(resources), "capacity": dict(resources)}}


def _pod(name: str, cpu: str, *, node: str = "", spec: dict[str, Any] | None = None,
         labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                            "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}],
                            **(spec or {})}
    if node:
        body["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "labels": labels or {},
                         "annotations": annotations or {}},
            "spec": body, "status": {"phase": "Running" if node else "Pending"}}


def snapshot_objects() -> list[dict[str, Any]]:
    """Six nodes (one tainted, one unschedulable); a Workload gang of 4 with 3 pods; a PodGroup gang of
    2 with both pods; an annotation gang of 3 with 2 pods; bound and pending ordinary pods."""
    return [
        *(_node(n) for n in NODE_NAMES[:4]),
        _node("node-5", taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]),
        _node("node-6", unschedulable=True),
        {"apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload",
         "metadata": {"name": "training", "namespace": "default"},
         "spec": {"podGroups": [{"name": "workers", "policy": {"gang": {"minCount": 4}}}]}},
        {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
         "metadata": {"name": "pg", "namespace": "default"}, "spec": {"minMember": 2}},
        *(_pod(f"training-worker-{i}", "1", spec={"workloadRef": WORKLOAD_REF}) for i in range(3)),
        *(_pod(f"pg-{i}", "500m", labels={"scheduling.x-k8s.io/pod-group": "pg"}) for i in range(2)),
        *(_pod(f"an-{i}", "250m", annotations={"gang-extender.io/group": "an", "gang-extender.io/min-count": "3"})
          for i in range(2)),
        _pod("web-bound", "1", node="node-1"),
        _pod("web-1", "1"),
        _pod("web-2", "100m"),
    ]


def snapshot_document() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "items": snapshot_objects()}


POD_NAMES = [o["metadata"]["name"] for o in snapshot_objects() if o["kind"] == "Pod"]


# ------------------------------------------------------------------------------------ strategies
json_scalars = (st.none() | st.booleans() | st.integers(-(2**63), 2**64) | st.floats(allow_nan=False,
                allow_infinity=False) | HOSTILE_TEXT)


def json_documents(max_leaves: int = 25) -> st.SearchStrategy[Any]:
    return st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4)
                        | st.dictionaries(HOSTILE_TEXT, inner, max_size=4), max_leaves=max_leaves)


def deep(depth: int) -> str:
    """A placeholder that ``encode`` turns into a value nested ``depth`` levels deep (neither orjson,
    limited to 254 levels, nor Python's json encoder, limited by the recursion limit, can write one)."""
    return f"\x00DEEP{depth}\x00"


def _nested(depth: int) -> bytes:
    opens = b"".join(b"[" if level % 2 else b'{"x":' for level in range(depth))
    closes = b"".join(b"]" if level % 2 else b"}" for level in reversed(range(depth)))
    return opens + b"1" + closes


_DEEP = re.compile(rb'"\\u0000DEEP(\d+)\\u0000"')


hostile_values = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), HOSTILE_TEXT,
    st.just([]), st.just({}), st.lists(HOSTILE_TEXT, max_size=3),
    st.dictionaries(HOSTILE_TEXT, HOSTILE_TEXT, max_size=3),
    st.integers(200, 1010).map(deep),
)


@st.composite
def mutated(draw: st.DrawFn, value: Any, rate: int = 8) -> Any:
    """``value`` with about one in ``rate`` of its nodes replaced, dropped or joined by hostile values."""
    if draw(st.integers(0, rate - 1)) == 0:
        return draw(hostile_values)
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if draw(st.integers(0, rate * 2 - 1)) == 0:
                continue  # dropped
            out[key] = draw(mutated(item, rate))
        if draw(st.integers(0, rate - 1)) == 0:
            out[draw(HOSTILE_TEXT)] = draw(hostile_values)
        return out
    if isinstance(value, list):
        items = [draw(mutated(item, rate)) for item in value]
        if items and draw(st.integers(0, rate - 1)) == 0:
            items.append(items[0])  # a duplicate
        return items
    return value


quantities = st.one_of(
    st.sampled_from(["1", "100m", "0.5", "2Gi", "1e3", "512Mi", "0", "1k", "1.5", "+1", "1E", "1Ei", "4"]),
    st.integers(0, 64), st.decimals(0, 100, places=3).map(str), HOSTILE_TEXT)
node_names = st.sampled_from(NODE_NAMES) | st.sampled_from(["ghost", "nöde-1", "节点", "node-1 ", "NODE-1"]) | \
    HOSTILE_TEXT.filter(bool)
pod_names = st.sampled_from(POD_NAMES) | st.sampled_from(["nope", "training-worker-9", "web-1 "]) | \
    HOSTILE_TEXT.filter(bool)


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    """A valid-looking pod: plain, Workload member, PodGroup member or annotation gang member."""
    name = draw(pod_names)
    kind = draw(st.sampled_from(["plain", "workload", "podgroup", "annotation", "badgang"]))
    metadata: dict[str, Any] = {"name": name, "namespace": draw(st.sampled_from(["default", "other", "ünï"])),
                                "uid": draw(st.sampled_from([f"uid-{name}", "", "u-1"])), "labels": {},
                                "annotations": {}}
    spec: dict[str, Any] = {"containers": [
        {"name": "c", "resources": {"requests": {"cpu": draw(quantities), "memory": draw(quantities)},
                                    **({"limits": {"cpu": draw(quantities)}} if draw(st.booleans()) else {})}}
        for _ in range(draw(st.integers(0, 3)))]}
    if kind == "workload":
        spec["workloadRef"] = dict(WORKLOAD_REF, **({"podGroupReplicaKey": "r1"} if draw(st.booleans()) else {}))
    elif kind == "podgroup":
        metadata["labels"]["scheduling.x-k8s.io/pod-group"] = draw(st.sampled_from(["pg", "missing"]))
    elif kind == "annotation":
        metadata["annotations"] = {"gang-extender.io/group": "an",
                                   "gang-extender.io/min-count": draw(st.sampled_from(["3", "1", "0", "-1", "x",
                                                                                       "99999999999999999999"])),
                                   "gang-extender.io/timeout-seconds": draw(st.sampled_from(["5", "inf", "nan",
                                                                                             "-1", "1e308"]))}
    elif kind == "badgang":
        spec["workloadRef"] = {"name": draw(HOSTILE_TEXT), "podGroup": draw(HOSTILE_TEXT)}
    if draw(st.booleans()):
        spec["nodeSelector"] = {draw(st.sampled_from(["zone", "kubernetes.io/hostname", "x"])): draw(
            st.sampled_from(["1", "2", "node-3", ""]))}
    if draw(st.booleans()):
        spec["tolerations"] = [{"key": "dedicated", "operator": draw(st.sampled_from(["Equal", "Exists", "Bogus"])),
                                "value": "gpu", "effect": draw(st.sampled_from(["NoSchedule", "", "Bogus"]))}]
    if draw(st.booleans()):
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": draw(st.sampled_from(
                ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Bogus"])),
                "values": draw(st.lists(st.sampled_from(["1", "2", "x", "-5", "99999999999999999999999"]),
                                        max_size=3))}],
             "matchFields": [{"key": "metadata.name", "operator": "In", "values": [draw(node_names)]}]
             if draw(st.booleans()) else []}]}}}
        if draw(st.booleans()):
            spec["affinity"]["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"a": "b"}}, "topologyKey": "kubernetes.io/hostname"}]}
    if draw(st.booleans()):
        spec["initContainers"] = [{"name": "i", "restartPolicy": draw(st.sampled_from(["Always", "Never"])),
                                   "resources": {"requests": {"cpu": draw(quantities)}}}]
    if draw(st.booleans()):
        spec["overhead"] = {"cpu": draw(quantities)}
    if draw(st.booleans()):
        spec["volumes"] = [{"name": "v", "persistentVolumeClaim": {"claimName": "c"}}, {"name": "e", "emptyDir": {}}]
    return {"metadata": metadata, "spec": spec}


@st.composite
def raw_nodes(draw: st.DrawFn) -> dict[str, Any]:
    name = draw(node_names)
    return {"metadata": {"name": name, "labels": draw(st.dictionaries(HOSTILE_TEXT, HOSTILE_TEXT, max_size=2))},
            "spec": {"taints": draw(st.lists(st.fixed_dictionaries({"key": HOSTILE_TEXT, "effect": st.sampled_from(
                ["NoSchedule", "NoExecute", "PreferNoSchedule", ""])}), max_size=2)),
                "unschedulable": draw(st.booleans())},
            "status": {"allocatable": {"cpu": draw(quantities), "memory": draw(quantities)}}}


@st.composite
def filter_bodies(draw: st.DrawFn) -> dict[str, Any]:
    """A valid ExtenderArgs body (names or full nodes)."""
    pod = draw(pods())
    if draw(st.integers(0, 3)) == 0:
        items = draw(st.lists(raw_nodes(), max_size=5))
        return {"Pod": pod, "Nodes": {"metadata": {}, "items": items}, "NodeNames": None}
    return {"Pod": pod, "Nodes": None, "NodeNames": draw(st.lists(node_names, max_size=8))}


@st.composite
def bind_bodies(draw: st.DrawFn) -> dict[str, Any]:
    name = draw(pod_names)
    return {"PodName": name, "PodNamespace": draw(st.sampled_from(["default", "default", "other", "ünï"])),
            "PodUID": draw(st.sampled_from([f"uid-{name}", "", "uid-other"])), "Node": draw(node_names)}


@st.composite
def preempt_bodies(draw: st.DrawFn) -> dict[str, Any]:
    """A valid ExtenderPreemptionArgs body: victims by UID (nodeCacheCapable), or as full pods."""
    pod = draw(pods())
    uids = st.sampled_from(["uid-web-bound", "uid-pg-0", "uid-training-worker-0", "uid-unknown", "x"])
    nodes = draw(st.lists(node_names, max_size=4, unique=True))
    if draw(st.integers(0, 3)) == 0:
        return {"Pod": pod, "NodeNameToVictims": {n: {"Pods": draw(st.lists(pods(), max_size=2)),
                                                      "NumPDBViolations": draw(st.integers(0, 3))} for n in nodes}}
    return {"Pod": pod, "NodeNameToMetaVictims": {
        n: {"Pods": [{"UID": u} for u in draw(st.lists(uids, max_size=3))],
            "NumPDBViolations": draw(st.integers(0, 3))} for n in nodes}}


def valid_bodies(verb: str) -> st.SearchStrategy[dict[str, Any]]:
    return {"bind": bind_bodies, "preempt": preempt_bodies}.get(verb, filter_bodies)()


def encode(body: Any) -> bytes:
    """JSON as a scheduler would send it, or Python's encoder where orjson refuses (huge ints, lone
    surrogates) so those reach the server too."""
    try:
        data = orjson.dumps(body)
    except TypeError:
        data = json.dumps(body).encode()
    return _DEEP.sub(lambda match: _nested(int(match[1])), data)


@st.composite
def raw_bytes(draw: st.DrawFn, verb: str) -> bytes:
    valid = encode(draw(valid_bodies(verb)))
    kind = draw(st.integers(0, 7))
    if kind == 0:
        return draw(st.binary(max_size=200))
    if kind == 1:  # truncated
        return valid[: draw(st.integers(0, max(len(valid) - 1, 0)))]
    if kind == 2:  # a byte flipped
        if not valid:
            return valid
        index = draw(st.integers(0, len(valid) - 1))
        return valid[:index] + bytes([draw(st.integers(0, 255))]) + valid[index + 1:]
    if kind == 3:  # invalid UTF-8 inside a string
        return valid.replace(b'"default"', b'"def\xff\xfeault"', 1)
    if kind == 4:  # lone surrogate escapes, NaN, Infinity, comments, trailing data
        return draw(st.sampled_from([valid.replace(b'"default"', b'"\\ud800"', 1), valid + b"garbage", b"//\n" + valid,
                                     valid.replace(b"{", b"{\"x\": NaN, ", 1), valid + valid, b"\xef\xbb\xbf" + valid,
                                     valid.replace(b"[", b"[Infinity,", 1)]))
    if kind == 5:  # whitespace and exotic but valid JSON encodings
        return b" \n\t " + valid.replace(b":", b" :\n ") + b"\r\n"
    if kind == 6:
        return encode(draw(json_documents()))
    return b"[" * draw(st.integers(1, 3000))


def hostile_bodies(verb: str) -> st.SearchStrategy[bytes]:
    """Every family, weighted toward structurally plausible bodies (they reach deeper code)."""
    return st.one_of(
        raw_bytes(verb),
        json_documents().map(encode),
        valid_bodies(verb).flatmap(mutated).map(encode),
        valid_bodies(verb).flatmap(lambda body: mutated(body, rate=3)).map(encode),
        valid_bodies(verb).map(encode),
    )


# ------------------------------------------------------------------------------------ the contract
def check_reply(verb: str, body: bytes, status: int, content_type: str, data: bytes) -> None:
    """Raise AssertionError unless the reply honours docs/protocol.md for this request."""
    assert status in (200, 400, 413), f"HTTP {status} for {body[:300]!r}: {data[:500]!r}"
    assert content_type.startswith("application/json"), f"{content_type!r} for {body[:300]!r}"
    reply = orjson.loads(data)
    if status != 200:
        assert isinstance(reply, dict) and isinstance(reply.get("error"), str) and reply["error"], reply
        return
    request = orjson.loads(body)  # a 200 means the body parsed
    if verb == "bind":
        assert isinstance(reply, dict) and set(reply) == {"Error"} and isinstance(reply["Error"], str), reply
        assert "internal error" not in reply["Error"], reply
        return
    if verb == "preempt":  # only candidates it was asked about, each with victims it was given
        assert isinstance(reply, dict) and set(reply) == {"NodeNameToMetaVictims"}, reply
        asked = request.get("NodeNameToMetaVictims") or request.get("NodeNameToVictims") or {}
        for node, victims in reply["NodeNameToMetaVictims"].items():
            assert node in asked, (node, reply)
            given = {v.get("UID") or v.get("metadata", {}).get("uid") for v in asked[node]["Pods"]}
            assert {v["UID"] for v in victims["Pods"]} <= given, (node, victims, asked[node])
        return
    names = set(request["NodeNames"]) if request.get("NodeNames") is not None else {
        n["metadata"]["name"] for n in request["Nodes"].get("items") or []}
    if verb == "prioritize":
        assert isinstance(reply, list), reply
        for entry in reply:
            assert set(entry) == {"Host", "Score"} and entry["Host"] in names and 0 <= entry["Score"] <= 10, entry
        return
    assert set(reply) == {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}, reply
    assert "internal error" not in reply["Error"], reply
    assert isinstance(reply["NodeNames"], list), reply
    mentioned = set(reply["NodeNames"]) | set(reply["FailedNodes"]) | set(reply["FailedAndUnresolvableNodes"])
    assert mentioned <= names, (mentioned - names, reply)


Post = Callable[[str, bytes], tuple[int, str, bytes]]
