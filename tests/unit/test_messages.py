"""extender.model.messages: the exact text of every message users read about scheduling.

Users grep for these texts, alert on them and read them in ``kubectl describe``: every expected text
below is written out in full, copied from the code that built it before it moved to ``messages``, so
a change of wording fails here. ``COVERED`` lists every public name the tables test; a public name of
the module missing from it (a new message without a test) fails ``test_every_public_name_is_covered``.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from extender.gangs.domains import Domain
from extender.model import messages
from extender.model.cluster import PodRecord, Taint
from extender.model.gang import GangKey, GroupKind, GroupRef, Source

GANG = GangKey(GroupRef(GroupKind.PODGROUP, "ml", "train"))
REPLICA = GangKey(GroupRef(GroupKind.WORKLOAD, "ml", "job", "workers"), "2")
COSCHEDULING = GangKey(GroupRef(GroupKind.COSCHEDULING, "ml", "pg"))
ANNOTATED = GangKey(GroupRef(GroupKind.ANNOTATION, "ml", "grp"))
GI = 2**30
POD = PodRecord("uid-0", "ml", "worker-0", "", {"cpu": 2000, "memory": 4 * GI, "pods": 1}, GANG,
                scheduler_name="other-scheduler")
BOUND = PodRecord("uid-1", "ml", "worker-1", "node-b", {"cpu": 2000, "pods": 1}, GANG)
WHERE = " in example.com/rack=r1 (required example.com/rack (gang-extender annotation on the pods))"
NODES_12 = [f"n{i}" for i in range(12)]
TOPOLOGY = "spec.schedulingConstraints.topology"

CONSTANTS = {
    "NOT_SYNCED": "gang-extender is starting: its first list of nodes, pods and group objects is not complete; "
                  "kube-scheduler will retry",
    "NOT_LEADER": "this gang-extender replica is not the leader (it is competing for the Lease, or another replica "
                  "holds it): kube-scheduler will retry",
    "TOPOLOGY_GROUP_AND_PODS": "the group object and its pods",
    "NO_NODE_MATCHES": "no node matches its nodeSelector, affinity and tolerations",
    "ACROSS_DOMAINS": "across domains",
    "DOMAIN_LACKS_BOUND_MEMBERS": "does not hold the gang's bound members",
    "UNIT_BEING_PLACED": "it is being placed",
    "NOT_FULLY_LISTED": "the cluster is not fully listed yet",
    "BUDGETS_NOT_WATCHED": "the PodDisruptionBudget watch is not listed or not healthy",
    "NOT_LEADING": "this replica does not lead",
    "NO_VICTIMS": "no lower-priority victims",
    "NOT_LEADING_EVICTS_NOTHING": "this replica does not lead: it evicts nothing",
    "QUORUM_BOUND": "quorum reached: members bound",
    "NODE_SELECTOR_MISMATCH": "node does not match the pod's nodeSelector",
    "NODE_AFFINITY_MISMATCH": "node does not match the pod's required node affinity",
    "NODE_NOT_WATCHED": "node is not known to gang-extender (its node watch has not seen it)",
    "LOST_LEADERSHIP_ANSWERING": "this gang-extender replica lost its leadership while answering; kube-scheduler "
                                 "retries",
    "RESUME_GONE": "gone (deleted or re-created)",
    "RESUME_ALREADY_BOUND": "already bound",
    "RESUME_NEEDS_PREPARATION": "needs volume or claim preparation: passes the barrier at its next bind",
    "PREEMPT_NODE_UNKNOWN": "node is not known to gang-extender",
    "PREEMPT_NO_VICTIMS": "no victims on the node (kube-scheduler rejects an extender's node without victims)",
    "OTHER_NAMESPACE": "(another namespace)",
    "EVICTOR_NOT_LEADING": "this replica no longer leads",
    "RESUME_ABANDONED": "none of the release's Bindings had been made: the release is dropped and the gang forms "
                        "again at the barrier",
    "NO_NODE_MATCHES_MEMBERS": "no node matches the members' nodeSelector, affinity and tolerations",
    "NO_ROOM_AT_ONCE": "no node has room for a member at once",
}


def says(name: str, args: tuple[Any, ...], text: str) -> Any:
    """One row: ``messages.<name>(*args)`` must return ``text``."""
    return pytest.param(name, args, text, id=name)


FUNCTIONS = [
    says("gang_said", (GANG, "admitted"), "gang ml/train: admitted"),
    # ---------------------------------------------------------------------------- refusals
    says("api_silent", (42.4,), "the API server has not answered gang-extender for 42s: its view of the cluster "
                                "may be stale; kube-scheduler will retry"),
    says("watch_failing", ("pods", 61.6, "connection refused"),
         "gang-extender's pods watch has been failing for 62s (connection refused): its view of the cluster may be "
         "stale; kube-scheduler will retry"),
    says("watch_failing", ("nodes", 30.0, ""),
         "gang-extender's nodes watch has been failing for 30s (no detail): its view of the cluster may be stale; "
         "kube-scheduler will retry"),
    # ------------------------------------------------------------------------ group objects
    says("object_named", ("Workload", "ml", "job"), "Workload ml/job"),
    says("field_of", ("PodGroup ml/train", "spec.minMember"), "PodGroup ml/train: spec.minMember"),
    says("no_name", ("PodGroup",), "PodGroup has no metadata.name"),
    says("not_a_list", ("Workload ml/job: spec.podGroups",), "Workload ml/job: spec.podGroups must be a list"),
    says("not_an_object", ("PodGroup ml/train: spec.schedulingPolicy",),
         "PodGroup ml/train: spec.schedulingPolicy must be an object"),
    says("field_missing", ("Workload ml/job: spec.podGroups[1].name",),
         "Workload ml/job: spec.podGroups[1].name is missing"),
    says("not_positive_integer", ("PodGroup ml/pg: spec.minMember", 0),
         "PodGroup ml/pg: spec.minMember must be a positive integer, got 0"),
    says("not_positive_integer", ("gang-extender.io/min-count", "two"),
         "gang-extender.io/min-count must be a positive integer, got 'two'"),
    says("seconds_not_a_number", ("gang-extender.io/timeout-seconds", "soon"),
         "gang-extender.io/timeout-seconds must be a number of seconds, got 'soon'"),
    says("seconds_not_positive", ("gang-extender.io/timeout-seconds", "-5"),
         "gang-extender.io/timeout-seconds must be a positive number of seconds, got '-5'"),
    says("min_count_missing", ("gang-extender.io/group", "gang-extender.io/min-count"),
         "pod has gang-extender.io/group but no gang-extender.io/min-count annotation"),
    says("priority_not_integer", ("high",), "spec.priority must be an integer, got 'high'"),
    says("priority_not_integer", ("x" * 100,), "spec.priority must be an integer, got "
                                               "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'"),
    says("priority_class_unresolved", ("urgent",),
         "priorityClassName 'urgent' did not resolve to a priority (does the PriorityClass exist?): the members' pod "
         "priority applies"),
    says("max_wait_invalid", ("gang-extender.io/max-wait-seconds", "-1"),
         "gang-extender.io/max-wait-seconds must be a number of seconds >= 0, got '-1': the extender's "
         "--max-wait-seconds applies"),
    # ----------------------------------------------------------------- topology constraints
    says("field_problem", ("pod ml/w-0: annotation gang-extender.io/topology-required",
                           "'a b' is not a valid label key: the name is invalid"),
         "pod ml/w-0: annotation gang-extender.io/topology-required: 'a b' is not a valid label key: the name is "
         "invalid"),
    says("topology_annotation", ("pod ml/w-0", "gang-extender.io/topology-required"),
         "pod ml/w-0: annotation gang-extender.io/topology-required"),
    says("constraints_not_object", ("PodGroup ml/train", "rack"),
         "PodGroup ml/train: spec.schedulingConstraints must be an object, got 'rack'"),
    says("topology_not_list", ("PodGroup ml/train", TOPOLOGY, {"key": "rack"}),
         "PodGroup ml/train: spec.schedulingConstraints.topology must be a list, got {'key': 'rack'}"),
    says("topology_too_many", ("PodGroup ml/train", TOPOLOGY, 2),
         "PodGroup ml/train: spec.schedulingConstraints.topology has 2 entries; at most one is allowed"),
    says("topology_entry_not_object", ("PodGroup ml/train", TOPOLOGY, "rack"),
         "PodGroup ml/train: spec.schedulingConstraints.topology[0] must be an object with a key, got 'rack'"),
    says("topology_keys_differ", ("PodGroup ml/train", "required", "rack", Source.PODGROUP_FIELD, "zone",
                                  Source.GROUP_ANNOTATION),
         "PodGroup ml/train: two different required topology keys: 'rack' (PodGroup "
         "spec.schedulingConstraints.topology) and 'zone' (gang-extender annotation on the group object)"),
    says("members_disagree", ("preferred", "w-0", "rack", "w-3", "zone"),
         "members disagree on the preferred topology key: pod w-0 has 'rack', pod w-3 has 'zone'"),
    # ---------------------------------------------------------------------- the quorum gate
    says("group_missing", (GANG,), "waiting for gang ml/train: PodGroup ml/train does not exist"),
    says("group_missing", (REPLICA,),
         "waiting for gang ml/job/workers[2]: Workload ml/job pod group 'workers' does not exist"),
    says("group_missing", (COSCHEDULING,), "waiting for gang ml/pg: PodGroup ml/pg does not exist"),
    says("group_missing", (ANNOTATED,), "waiting for gang ml/grp: group ml/grp does not exist"),
    says("members_missing", (GANG, 3, 8), "waiting for gang ml/train: 3/8 pods exist"),
    # --------------------------------------------------------------------------- admission
    says("backing_off", (GANG, 29.6, 2),
         "gang ml/train is backing off for 30s after 2 timeout(s) so other gangs can proceed"),
    says("topology_unusable", (GANG, "members disagree"),
         "gang ml/train cannot be placed: its topology constraint is unusable: members disagree"),
    says("capacity_wait", (GANG, 3, 8, "no node has cpu=4 free at once"),
         "waiting for capacity for gang ml/train: 3/8 remaining members fit; no node has cpu=4 free at once"),
    says("never_fits", (GANG, 5, 8, 4, "no node has cpu=64 free at once"),
         "gang ml/train can never fit this cluster: only 5 of 8 members fit on 4 nodes even when they are empty; "
         "no node has cpu=64 free at once"),
    says("never_fits_topology", (GANG, "no rack domain can hold the gang"),
         "gang ml/train can never fit: no rack domain can hold the gang"),
    says("admitted", (8, 3, WHERE),
         "admitted: 8 member(s) reserved on 3 node(s) in example.com/rack=r1 (required example.com/rack "
         "(gang-extender annotation on the pods))"),
    says("admitted_event", (GANG, 8, ""), "gang ml/train admitted: capacity reserved for 8 more member(s)"),
    says("topology_fallback", (GANG, "example.com/rack", " in across domains (preferred example.com/rack)"),
         "gang ml/train: no example.com/rack domain could hold it; placed in across domains (preferred "
         "example.com/rack)"),
    says("release_too_large", (GANG, 900, 819),
         "gang ml/train would release 900 members at once but a release written on the leader's Lease holds at "
         "most 819: raise --release-intents-max-bytes"),
    says("holds_too_many", (GANG, 600, 504),
         "gang ml/train would hold 600 binds at once but gang-extender can hold at most 504: raise --threads"),
    says("barrier_full", (GANG, 40, 16, 48),
         "waiting for a barrier slot for gang ml/train: gangs in flight may hold 40 binds; 16 more would exceed the "
         "limit of 48 (--threads)"),
    # ------------------------------------------------------ why the rest of a gang does not fit
    says("no_node_has_free", ({"cpu": 3000}, {"cpu": 1000}),
         "no node has cpu=3 free (largest free falls short by cpu=1)"),
    says("no_node_has_free", ({"cpu": 3000, "memory": 8 * GI}, {"cpu": 500, "memory": GI}),
         "no node has cpu=3, memory=8Gi free (largest free falls short by cpu=500m, memory=1Gi)"),
    says("no_node_has_at_once", ({"cpu": 2000, "memory": 4 * GI, "pods": 1},),
         "no node has cpu=2, memory=4Gi, pods=1 free at once"),
    # -------------------------------------------------------------------- topology domains
    says("bound_node_unlabelled", ("node-a", "example.com/rack"),
         "a bound member's node node-a has no label example.com/rack"),
    says("bound_in_two_domains", (Domain(("zone", "rack"), ("z1", "r1")), Domain(("zone", "rack"), ("z1", "r2"))),
         "bound members are in two domains: zone=z1, rack=r1 and zone=z1, rack=r2"),
    says("bound_domain_has_no_nodes", ("rack=r1",), "the bound members' domain rack=r1 has none of the nodes"),
    says("domain_lacks_free_cpu", (6000, 8500), "has cpu=6 free of the cpu=8500m needed"),
    says("domain_lacks_allocatable_cpu", (16000, 32000), "has cpu=16 allocatable of the cpu=32 needed"),
    says("domain_fits_some", (3, 8, "no node has cpu=4 free at once"),
         "3 of 8 members fit: no node has cpu=4 free at once"),
    says("no_node_labelled", (("example.com/zone", "example.com/rack"),),
         "no node has the label example.com/zone, example.com/rack"),
    says("no_domain_can_hold", ("rack", "no node has the label rack"),
         "no rack domain can hold the gang: no node has the label rack"),
    says("no_domain_holds_all", ("rack", 8, "rack=r1", 4, "has cpu=6 free of the cpu=8 needed"),
         "no rack domain holds all 8 of them; the roomiest, rack=r1 (4 nodes), has cpu=6 free of the cpu=8 needed"),
    says("no_domain_even_empty", ("rack", 8, Domain(("rack",), ("r1",)), 4,
                                  "has cpu=16 allocatable of the cpu=32 needed"),
         "no rack domain can hold all 8 members even when empty; the largest, rack=r1 (4 nodes), has cpu=16 "
         "allocatable of the cpu=32 needed"),
    says("placed_in_domain", ("example.com/rack=r1", "required example.com/rack (gang-extender annotation on the "
                                                     "pods)"), WHERE),
    # --------------------------------------------------------------------------- the order
    says("draining", (125.4, 3),
         "waited 125s, longer than its maximum wait: capacity freeing up on 3 node(s) is reserved for it as it "
         "frees (a draining reservation)"),
    says("draining_event", (GANG, "drains", ["n1", "n2"]), "gang ml/train drains: n1, n2"),
    says("draining_event", (GANG, "drains", NODES_12),
         "gang ml/train drains: n0, n1, n2, n3, n4, n5, n6, n7, n8, n9, ..."),
    # -------------------------------------------------------------------------- preemption
    says("unit_pod", (POD,), "pod ml/worker-0"),
    says("unit_member", (POD, GANG), "pod ml/worker-0 of gang ml/train"),
    says("unit_gang", (REPLICA,), "gang ml/job/workers[2]"),
    says("victims_exceed_budget", ("PodDisruptionBudget web allows 0",),
         "the chosen victims together exceed a disruption budget: PodDisruptionBudget web allows 0"),
    says("eviction_rate_full", (12,), "evicting 12 pod(s) would exceed --max-evictions-per-minute"),
    says("preempting", (GANG, 1000, 6, ["gang ml/a", "pod ml/b"]),
         "gang ml/train (priority 1000) does not fit on free capacity: preempting 6 pod(s) in 2 unit(s) of lower "
         "priority: gang ml/a, pod ml/b"),
    says("preempting", (GANG, 1000, 7, ["pod ml/a", "pod ml/b", "pod ml/c", "pod ml/d", "pod ml/e", "pod ml/f"]),
         "gang ml/train (priority 1000) does not fit on free capacity: preempting 7 pod(s) in 6 unit(s) of lower "
         "priority: pod ml/a, pod ml/b, pod ml/c, pod ml/d, pod ml/e, ..."),
    says("victims_pending", (GANG, [BOUND, POD]),
         "gang ml/train waits for 2 preempted pod(s) to end, e.g. ml/worker-1"),
    says("evictions_failed", (GANG, [("ml/a", "failed: boom"), ("ml/b", "gone"), ("ml/c", "rate-limited"),
                                     ("ml/d", "failed")], 30.0),
         "gang ml/train: 4 eviction(s) failed (ml/a: failed: boom; ml/b: gone; ml/c: rate-limited); the place it "
         "reserved is dropped and it tries again in 30s at the earliest"),
    says("no_victims", ([],), "no lower-priority victims: no running units"),
    says("no_victims", (["3 running unit(s) have priority 100 or higher",
                         "1 run only on nodes none of the members can use"],),
         "no lower-priority victims: 3 running unit(s) have priority 100 or higher; 1 run only on nodes none of the "
         "members can use"),
    says("units_not_lower", (3, 100), "3 running unit(s) have priority 100 or higher"),
    says("units_not_evictable", (1, "pod work/guarded", "PodDisruptionBudget web allows 0"),
         "1 may not be evicted (pod work/guarded: PodDisruptionBudget web allows 0)"),
    says("units_not_evictable", (2, "gang ml/a", ""), "2 may not be evicted (gang ml/a: not evictable)"),
    says("units_on_unusable_nodes", (1,), "1 run only on nodes none of the members can use"),
    says("victims_not_enough", (4, 9, 5, 8, "no node has cpu=4 free at once"),
         "even evicting every eligible unit (4 units, 9 pods) leaves 5/8 members placed: no node has cpu=4 free at "
         "once"),
    says("rate_bound_no_room", (10.0, 12),
         "the eviction rate bound (10 a minute) has no room for 12 eviction(s) now"),
    says("preempted_by", ("gang ml/train", "gang ml/train (priority 1000) does not fit on free capacity"),
         "preempted by gang ml/train: gang ml/train (priority 1000) does not fit on free capacity"),
    # ------------------------------------------------------------------------- the barrier
    says("already_held", (POD,), "pod ml/worker-0 is already waiting at its gang barrier"),
    says("bind_too_late", (POD,),
         "bind of pod ml/worker-0 reached gang-extender too late to be held (kube-scheduler's httpTimeout less the "
         "answer margin had passed); kube-scheduler retries it"),
    says("holding", (3, 5, 8), "holding 3 bind(s); 5/8 members placed"),
    says("still_gathering", (GANG, 5, 8, 12.3),
         "gang ml/train is still gathering members (5/8 placed, the last new one 12s ago): its held binds are "
         "answered before kube-scheduler's httpTimeout; each keeps its reserved place and kube-scheduler retries it"),
    says("release_aborted", (GANG, "node node-a no longer exists"),
         "gang ml/train was not released: node node-a no longer exists; nothing of the gang was bound, its "
         "reservation is dropped and it is planned again when kube-scheduler retries its members"),
    says("member_node_gone", (POD, "node-a"), "member ml/worker-0: node node-a no longer exists"),
    says("member_no_longer_fits", (POD, "node-a", "Insufficient cpu"),
         "member ml/worker-0 no longer fits node node-a: Insufficient cpu"),
    says("member_node_overcommitted", (POD, "node-a", "cpu", 9000, 8000),
         "member ml/worker-0: node node-a is over-committed in cpu (placed and held cpu=9, allocatable cpu=8): "
         "another binder placed a pod there after this gang was admitted"),
    says("node_unknown_at_bind", ("node-a",), "node node-a is not known to the extender"),
    says("does_not_fit", (POD, "node-a", "node has untolerated taint gpu=true:NoSchedule"),
         "pod ml/worker-0 does not fit node node-a: node has untolerated taint gpu=true:NoSchedule"),
    says("no_room_left", (POD, "node-a", "memory", {"cpu": 1000, "memory": GI}),
         "node node-a no longer has room for pod ml/worker-0: insufficient memory (needs memory=4Gi, free "
         "memory=1Gi)"),
    says("no_room_left", (POD, "node-a", "cpu", {}),
         "node node-a no longer has room for pod ml/worker-0: insufficient cpu (needs cpu=2, free cpu=0)"),
    says("outside_domain", ("node-a", GANG, "rack=r1"),
         "node node-a is outside gang ml/train's topology domain rack=r1"),
    says("release_partly_failed", (2,),
         "quorum released but 2 Binding(s) failed: their places stay reserved until kube-scheduler retries them"),
    says("bind_failed", (GANG, "binding pod ml/worker-0 to node-a failed: KubeError: 500"),
         "gang ml/train: binding pod ml/worker-0 to node-a failed: KubeError: 500; members already bound stay bound "
         "(a Binding cannot be undone) and kube-scheduler retries this one"),
    says("bound_together", (GANG, 8), "gang ml/train: 8 member(s) bound together at quorum"),
    says("released_after_policy_change", (4,), "quorum reached after a policy change: binding 4 held member(s)"),
    says("already_bound", (POD, "node-a"), "pod ml/worker-0 is already bound to node-a"),
    says("release_resumed_by_leader", (GANG, 3),
         "gang ml/train: the previous gang-extender leader was binding this gang's quorum when it stopped; the "
         "remaining 3 member(s) bind as soon as kube-scheduler retries them"),
    says("release_resumed_after_restart", (GANG, 3),
         "gang ml/train: gang-extender restarted while binding this gang's quorum; it bound the remaining 3 "
         "member(s) to the nodes kube-scheduler had chosen"),
    # ---------------------------------------------------------------------------- timeouts
    says("timed_out_held", (GANG, 300.0, 5, 8),
         "gang ml/train timed out after 300s with 5 member(s) held of 8 needed; released its reservation and "
         "backing off"),
    says("timed_out_held", (GANG, 2.5, 5, 8),
         "gang ml/train timed out after 2.5s with 5 member(s) held of 8 needed; released its reservation and "
         "backing off"),
    says("never_offered", (["n1", "n2"],),
         "; kube-scheduler never offered its reserved node(s) n1, n2: the next plans avoid them"),
    says("never_offered", (NODES_12,),
         "; kube-scheduler never offered its reserved node(s) n0, n1, n2, n3, n4, ...: the next plans avoid them"),
    # --------------------------------------------------------------- the filter-gated mode
    says("never_binds", ("ml", "w-0"),
         "pod ml/w-0 was not bound: gang-extender runs filter-gated (--bind-mode filter-gated) and never binds; "
         "remove bindVerb from its extenders entry"),
    says("no_place_left", (GANG,),
         "no place in gang ml/train's reservation is left for it (the others are claimed by members being bound, "
         "or gang-extender has not seen this pod yet)"),
    says("gated_progress", (3, 8), "admitted: 3/8 members bound by the binder (filter-gated mode)"),
    says("gated_complete", (8,), "quorum reached: 8 members bound by the binder (filter-gated mode)"),
    says("timed_out_bound", (GANG, 120.0, 3, 8),
         "gang ml/train timed out after 120s with 3 of 8 members bound; released its reservation and backing off"),
    says("never_bound_there", (["n1", "n2"],),
         "; members sent to n1, n2 were never bound there: the next plans avoid them"),
    says("never_bound_there", (NODES_12,),
         "; members sent to n0, n1, n2, n3, n4 were never bound there: the next plans avoid them"),
    says("partly_bound", (GANG, 3, 8, 120.0),
         "gang ml/train is partly bound: 3 of 8 members are bound and the rest were not bound within 120s "
         "(filter-gated mode has no bind-time barrier, and a Binding cannot be undone); the rest are planned again "
         "around the bound members after the back-off"),
    # ---------------------------------------------------- a node the pod's placement excludes
    says("untolerated_taint", (Taint("gpu", "true", "NoSchedule"),),
         "node has untolerated taint gpu=true:NoSchedule"),
    says("untolerated_taint", (Taint("node.kubernetes.io/unschedulable", "", "NoSchedule"),),
         "node has untolerated taint node.kubernetes.io/unschedulable=:NoSchedule"),
    # ------------------------------------------------------------------- per-node verdicts
    says("insufficient", ("cpu",), "Insufficient cpu"),
    says("insufficient_reserved", ("nvidia.com/gpu",),
         "Insufficient nvidia.com/gpu: capacity is reserved for other gangs"),
    says("outside_gang_domain", ("rack=r1", GANG), "outside the topology domain rack=r1 of gang ml/train"),
    says("invalid_gang", ("PodGroup ml/pg: spec.minMember must be a positive integer, got 0",),
         "invalid gang: PodGroup ml/pg: spec.minMember must be a positive integer, got 0"),
    # ----------------------------------------------------------------------- the bind verb
    says("pod_unknown_no_time", ("ml", "w-0"), "pod ml/w-0 is not known yet and the request has no time left"),
    says("pod_unreadable", ("ml", "w-0", "timed out"), "cannot read pod ml/w-0: timed out"),
    says("pod_missing", ("ml", "w-0"), "pod ml/w-0 does not exist"),
    says("pod_malformed", ("ml", "w-0", "invalid quantity 'x'"), "pod ml/w-0 cannot be read: invalid quantity 'x'"),
    says("scheduler_not_served", (POD, frozenset({"gang-scheduler", "default-scheduler"})),
         "pod ml/worker-0 has schedulerName 'other-scheduler', which gang-extender does not serve "
         "(--scheduler-names default-scheduler,gang-scheduler)"),
    says("uid_mismatch", (POD, "uid-9"), "pod ml/worker-0 has uid uid-0, not uid-9: it was re-created"),
    says("binding_not_attempted_late", (POD, "node-a"),
         "binding pod ml/worker-0 to node-a was not attempted: kube-scheduler's httpTimeout for this request had "
         "(almost) passed; it retries the pod"),
    says("binding_not_attempted_deposed", (POD,),
         "binding pod ml/worker-0 was not attempted: this gang-extender replica lost its leadership during the "
         "release; kube-scheduler retries it"),
    says("binding_failed", (POD, "node-a", "KubeError: 409"),
         "binding pod ml/worker-0 to node-a failed: KubeError: 409"),
    says("release_not_recorded", (GANG, "release of gang ml/train not recorded: this replica is not the leader"),
         "gang ml/train was not released: release of gang ml/train not recorded: this replica is not the leader; "
         "nothing was bound and kube-scheduler retries its members"),
    # --------------------------------------------------------------------- the preempt verb
    says("preemptor_group_unseen", (GANG,), "gang ml/train is not defined yet (its group object has not been seen)"),
    says("preemptor_incomplete", (GANG, 3, 8),
         "gang ml/train is not complete (3/8 members placed): preempting for one member would evict pods for a gang "
         "that still cannot run"),
    says("victim_unknown", ("uid-9",), "victim 'uid-9' is not a pod gang-extender knows on this node"),
    says("victim_unknown", ("u" * 100,),
         "victim 'uuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuu' is not a pod gang-extender knows "
         "on this node"),
    says("victim_in_gang", (GANG, True),
         "victims include a member of a gang (ml/train): kube-scheduler's per-pod preemption would split it"),
    says("victim_in_gang", (GANG, False),
         "victims include a member of a gang whose group is not seen yet (ml/train): kube-scheduler's per-pod "
         "preemption would split it"),
    # ------------------------------------------------------------------------------ explain
    says("members_need", (3, "cpu", 12000, 5500), "3 member(s) need cpu=12, cpu=5500m is free"),
    says("fragmented", ("memory", 8 * GI), "enough in total, but no node has memory=8Gi free for one member"),
    says("state_summary", ("ml/train", "WaitingForCapacity", 8, 0, 0, 8,
                           "waiting for capacity for gang ml/train: 3/8 remaining members fit; no node has cpu=4 free "
                           "at once"),
         "gang ml/train: WaitingForCapacity; 8 member(s) exist, 0 bound, 0 held; minCount 8; waiting for capacity for "
         "gang ml/train: 3/8 remaining members fit; no node has cpu=4 free at once"),
    says("state_summary", ("ml/train", "Complete", 8, 8, 0, 8, ""),
         "gang ml/train: Complete; 8 member(s) exist, 8 bound, 0 held; minCount 8"),
    says("state_summary", ("ml/other", "NotAGang", 2, 0, 0, None, ""),
         "gang ml/other: NotAGang; 2 member(s) exist, 0 bound, 0 held; minCount None"),
    says("priority_differs_from_group", ("5, 10", 10),
         "its members' pod priority (5, 10) differs from the group's priority 10: ordered by the lowest, and it "
         "never preempts"),
    says("member_priorities_differ", ("0, 100",),
         "its members have different priorities (0, 100): ordered by the lowest, and it never preempts"),
    says("eviction_outcome", ("refused-budget", "Cannot evict pod as it would violate the pod's disruption budget."),
         "refused-budget: Cannot evict pod as it would violate the pod's disruption budget."),
    says("eviction_outcome", ("failed", ""), "failed"),
    says("several_budgets", (BOUND, "ml/a, ml/b"),
         "pod ml/worker-1 is selected by more than one PodDisruptionBudget (ml/a, ml/b): the Eviction API refuses to "
         "evict it"),
    says("budget_not_computed", ("ml/guard",),
         "PodDisruptionBudget ml/guard has no status for its current generation yet (the disruption controller has "
         "not computed it): it allows no eviction"),
    says("budget_exceeded", (3, "ml/guard", 1),
         "evicting 3 pod(s) selected by PodDisruptionBudget ml/guard exceeds the 1 disruption(s) it allows now"),
    says("intent_not_leader", (GANG,), "release of gang ml/train not recorded: this replica is not the leader"),
    says("intent_not_written", (GANG, "the Lease write timed out"),
         "release of gang ml/train not recorded: the Lease write timed out"),
    says("intents_too_large", (GANG, 140000, 131072),
         "release of gang ml/train not recorded: the open releases would take 140000 bytes, more than "
         "release-intents-max-bytes (131072)"),
    says("lease_annotations_too_large", (GANG, 270000, 262144),
         "release of gang ml/train not recorded: the Lease's annotations would take 270000 bytes, more than the API "
         "server's limit (262144)"),
    says("pod_not_in_snapshot", ("ml", "worker-0"), "pod ml/worker-0 is not in the snapshot"),
    says("node_not_in_snapshot", ("n9",), "node n9 is not in the snapshot"),
    says('held_member_gone', (POD,),
         'pod ml/worker-0 (uid uid-0) was deleted, re-created or finished while its bind was held at its '
         "gang's barrier: it no longer counts toward the quorum"),
    says('held_members_gone', (2,),
         '2 held member(s) were deleted, re-created or finished before the quorum was released: the gang '
         'waits for members that exist'),
    says('release_partly_bound', (GANG, 3, 4, "binding pod ml/worker-3 to n4 failed: pods \"worker-3\" not found"),
         'gang ml/train is partly bound: 3 of the 4 members released together were bound and the API '
         'server refused the rest (binding pod ml/worker-3 to n4 failed: pods "worker-3" not found); a '
         'Binding cannot be undone, so the refused members keep their reserved places and are bound when '
         'kube-scheduler retries them (or the pods that replace them come)'),
    says('quorum_too_late', (GANG, 2, 1.0),
         "gang ml/train reached its quorum but 2 hold(s) had less than 1.0s left before kube-scheduler's "
         'timeout, the time a release needs to be written down and bound: all of its held binds are '
         'answered together and come back together; each keeps its reserved place'),
    says('pod_not_seen', ("uid-0",),
         "pod uid 'uid-0' is not known to gang-extender yet (its pod watch has not delivered it): nothing"
         ' is decided for it until it is; kube-scheduler retries it'),
    says('release_abandoned', (GANG, 3),
         "gang ml/train: the gang-extender that was releasing this gang's quorum stopped before any of "
         'its 3 Binding(s) was made (the API server shows none of them bound): the release is dropped and'
         ' the gang forms again at the barrier'),
    says('no_room_after_victims', ("n1", "cpu", {"cpu": 3000}, {"cpu": 1000}),
         'the preemptor would not fit on node n1 even once these victims are gone: insufficient cpu '
         '(needs cpu=3, cpu=1 would be free; the rest is reserved for other gangs or used by pods that '
         'stay)'),
    says('victim_partly_evicted', ("gang ml/low", 2, 4, "refused-budget: Cannot evict pod"),
         'gang ml/low was evicted as a unit for a higher-priority gang, but only 2 of its 4 pod(s) went: '
         'the rest were refused (refused-budget: Cannot evict pod) after retries; a disruption budget or '
         'the API server keeps them'),
]

COVERED = {
    "NOT_SYNCED", "NOT_LEADER", "TOPOLOGY_GROUP_AND_PODS", "NO_NODE_MATCHES", "ACROSS_DOMAINS",
    "DOMAIN_LACKS_BOUND_MEMBERS", "UNIT_BEING_PLACED", "NOT_FULLY_LISTED", "BUDGETS_NOT_WATCHED", "NOT_LEADING",
    "NO_VICTIMS", "NOT_LEADING_EVICTS_NOTHING", "QUORUM_BOUND", "NODE_SELECTOR_MISMATCH", "NODE_AFFINITY_MISMATCH",
    "NODE_NOT_WATCHED", "LOST_LEADERSHIP_ANSWERING", "RESUME_GONE", "RESUME_ALREADY_BOUND", "RESUME_NEEDS_PREPARATION",
    "PREEMPT_NODE_UNKNOWN", "PREEMPT_NO_VICTIMS", "OTHER_NAMESPACE", "NO_NODE_MATCHES_MEMBERS", "NO_ROOM_AT_ONCE",
    "gang_said",
    "api_silent", "watch_failing",
    "object_named", "field_of", "no_name", "not_a_list", "not_an_object", "field_missing", "not_positive_integer",
    "seconds_not_a_number", "seconds_not_positive", "min_count_missing", "priority_not_integer",
    "priority_class_unresolved", "max_wait_invalid",
    "field_problem", "topology_annotation", "constraints_not_object", "topology_not_list", "topology_too_many",
    "topology_entry_not_object", "topology_keys_differ", "members_disagree",
    "group_missing", "members_missing",
    "backing_off", "topology_unusable", "capacity_wait", "never_fits", "never_fits_topology", "admitted",
    "admitted_event", "topology_fallback", "release_too_large", "holds_too_many", "barrier_full",
    "no_node_has_free", "no_node_has_at_once",
    "bound_node_unlabelled", "bound_in_two_domains", "bound_domain_has_no_nodes", "domain_lacks_free_cpu",
    "domain_lacks_allocatable_cpu", "domain_fits_some", "no_node_labelled", "no_domain_can_hold",
    "no_domain_holds_all", "no_domain_even_empty", "placed_in_domain",
    "draining", "draining_event",
    "unit_pod", "unit_member", "unit_gang", "victims_exceed_budget", "eviction_rate_full", "preempting",
    "victims_pending", "evictions_failed", "no_victims", "units_not_lower", "units_not_evictable",
    "units_on_unusable_nodes", "victims_not_enough", "rate_bound_no_room", "preempted_by",
    "already_held", "bind_too_late", "holding", "still_gathering", "release_aborted",
    "member_node_gone", "member_no_longer_fits", "member_node_overcommitted", "node_unknown_at_bind", "does_not_fit",
    "no_room_left", "outside_domain", "release_partly_failed", "bind_failed", "bound_together",
    "released_after_policy_change", "already_bound", "release_resumed_by_leader", "release_resumed_after_restart",
    "timed_out_held", "never_offered",
    "never_binds", "no_place_left", "gated_progress", "gated_complete", "timed_out_bound", "never_bound_there",
    "partly_bound",
    "untolerated_taint",
    "insufficient", "insufficient_reserved", "outside_gang_domain", "invalid_gang",
    "pod_unknown_no_time", "pod_unreadable", "pod_missing", "pod_malformed", "scheduler_not_served", "uid_mismatch",
    "binding_not_attempted_late", "binding_not_attempted_deposed", "binding_failed", "release_not_recorded",
    "preemptor_group_unseen", "preemptor_incomplete", "victim_unknown", "victim_in_gang",
    "members_need", "fragmented", "state_summary",
    "EVICTOR_NOT_LEADING", "priority_differs_from_group", "member_priorities_differ", "eviction_outcome",
    "several_budgets", "budget_not_computed", "budget_exceeded", "intent_not_leader", "intent_not_written",
    "intents_too_large", "lease_annotations_too_large", "pod_not_in_snapshot", "node_not_in_snapshot",
    'held_member_gone', 'held_members_gone',
    'release_partly_bound',
    'quorum_too_late',
    'pod_not_seen',
    'release_abandoned', 'RESUME_ABANDONED',
    'no_room_after_victims',
    'victim_partly_evicted',
}
"""Every public name of ``messages`` the tables above test (a new message needs a row there and a name here)."""


@pytest.mark.parametrize(("name", "text"), list(CONSTANTS.items()), ids=list(CONSTANTS))
def test_constant_text(name: str, text: str) -> None:
    assert getattr(messages, name) == text


@pytest.mark.parametrize(("name", "args", "text"), FUNCTIONS)
def test_function_text(name: str, args: tuple[Any, ...], text: str) -> None:
    assert getattr(messages, name)(*args) == text


def _imported_names() -> set[str]:
    """The names ``messages`` imports (they are not its messages)."""
    tree = ast.parse(Path(messages.__file__).read_text(encoding="utf-8"))
    return {alias.asname or alias.name.split(".")[0] for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom) for alias in node.names}


def test_every_public_name_is_covered() -> None:
    public = {n for n in dir(messages) if not n.startswith("_") and n.isidentifier()} - _imported_names()
    assert public - COVERED == set(), "a message without a test: add a row to CONSTANTS or FUNCTIONS"
    assert COVERED - public == set(), "COVERED names a message that no longer exists"


def test_the_tables_test_every_covered_name() -> None:
    tested = set(CONSTANTS) | {param.values[0] for param in FUNCTIONS}
    assert tested == COVERED
