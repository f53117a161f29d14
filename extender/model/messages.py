"""Every sentence gang-extender says about scheduling: FailedScheduling reasons, bind errors, Events and
``explain``'s lines (pure).

Owns: the exact text of each message, one function (or constant) per message, each with a test of its
text (``tests/unit/test_messages.py``). Users grep for these, alert on them and read them in
``kubectl describe``: a change of wording is a change of behaviour. Must not: decide anything, read
state, or import anything but the model's values and the stdlib. (Replies to a malformed request,
configuration errors and log lines are not here: they speak to whoever made the request or runs the
extender, and stay beside the check that makes them.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from extender.model.cluster import PodRecord
from extender.model.gang import GangKey, GroupKind
from extender.model.quantity import describe

_OBJECT_NAMES = {GroupKind.WORKLOAD: "Workload", GroupKind.PODGROUP: "PodGroup",
                 GroupKind.COSCHEDULING: "PodGroup"}


def _pod(pod: PodRecord) -> str:
    return f"{pod.namespace}/{pod.name}"


def _shown(names: Sequence[str], most: int = 5) -> str:
    """The first ``most`` of ``names``, then ", ..." when there are more."""
    return ", ".join(names[:most]) + (", ..." if len(names) > most else "")


def gang_said(gang: GangKey, text: str) -> str:
    """An Event's message about ``gang``: ``gang ns/name: <text>``."""
    return f"gang {gang}: {text}"


# --------------------------------------------------------------------------- the quorum gate
def group_missing(gang: GangKey) -> str:
    kind = _OBJECT_NAMES.get(gang.group.kind, "group")
    what = f"{kind} {gang.group.namespace}/{gang.group.name}"
    if gang.group.pod_group:
        what += f" pod group {gang.group.pod_group!r}"
    return f"waiting for gang {gang}: {what} does not exist"


def members_missing(gang: GangKey, members: int, min_count: int) -> str:
    return f"waiting for gang {gang}: {members}/{min_count} pods exist"


# ------------------------------------------------------------------------------- admission
def backing_off(gang: GangKey, seconds: float, timeouts: int) -> str:
    return f"gang {gang} is backing off for {seconds:.0f}s after {timeouts} timeout(s) so other gangs can proceed"


def topology_unusable(gang: GangKey, problem: str) -> str:
    return f"gang {gang} cannot be placed: its topology constraint is unusable: {problem}"


def capacity_wait(gang: GangKey, placed: int, needed: int, blocking: str) -> str:
    """A gang that does not fit the free capacity yet (resolvable: may change)."""
    return f"waiting for capacity for gang {gang}: {placed}/{needed} remaining members fit; {blocking}"


def never_fits(gang: GangKey, placed: int, min_count: int, nodes: int, blocking: str) -> str:
    """The fail-fast message for a gang that could not fit even an empty cluster."""
    return (f"gang {gang} can never fit this cluster: only {placed} of {min_count} members fit on {nodes} nodes "
            f"even when they are empty; {blocking}")


def never_fits_topology(gang: GangKey, why: str) -> str:
    return f"gang {gang} can never fit: {why}"


def admitted(members: int, nodes: int, where: str) -> str:
    return f"admitted: {members} member(s) reserved on {nodes} node(s){where}"


def admitted_event(gang: GangKey, members: int, where: str) -> str:
    return f"gang {gang} admitted: capacity reserved for {members} more member(s){where}"


def topology_fallback(gang: GangKey, preferred: str, where: str) -> str:
    return f"gang {gang}: no {preferred} domain could hold it; placed{where}"


def release_too_large(gang: GangKey, needed: int, most: int) -> str:
    return (f"gang {gang} would release {needed} members at once but a release written on the leader's Lease "
            f"holds at most {most}: raise --release-intents-max-bytes")


def holds_too_many(gang: GangKey, needed: int, limit: int) -> str:
    return (f"gang {gang} would hold {needed} binds at once but gang-extender can hold at most {limit}: "
            "raise --threads")


def barrier_full(gang: GangKey, in_flight: int, needed: int, limit: int) -> str:
    return (f"waiting for a barrier slot for gang {gang}: gangs in flight may hold {in_flight} binds; {needed} more "
            f"would exceed the limit of {limit} (--threads)")


# --------------------------------------------------------------------------------- the order
def draining(waited: float, nodes: int) -> str:
    return (f"waited {waited:.0f}s, longer than its maximum wait: capacity freeing up on {nodes} node(s) is "
            "reserved for it as it frees (a draining reservation)")


def draining_event(gang: GangKey, said: str, nodes: Sequence[str]) -> str:
    return f"gang {gang} {said}: {', '.join(nodes[:10])}{', ...' if len(nodes) > 10 else ''}"


# ------------------------------------------------------------------------------- preemption
UNIT_BEING_PLACED = "it is being placed"
"""Why a gang is not a preemption victim while it is admitted."""


def unit_pod(pod: PodRecord) -> str:
    return f"pod {_pod(pod)}"


def unit_member(pod: PodRecord, gang: GangKey) -> str:
    return f"pod {_pod(pod)} of gang {gang}"


def unit_gang(gang: GangKey) -> str:
    return f"gang {gang}"


def victims_exceed_budget(why: str) -> str:
    return f"the chosen victims together exceed a disruption budget: {why}"


def eviction_rate_full(pods: int) -> str:
    return f"evicting {pods} pod(s) would exceed --max-evictions-per-minute"


def preempting(gang: GangKey, priority: int, pods: int, units: Sequence[str]) -> str:
    return (f"gang {gang} (priority {priority}) does not fit on free capacity: preempting {pods} pod(s) in "
            f"{len(units)} unit(s) of lower priority: {_shown(units)}")


def victims_pending(gang: GangKey, remaining: Sequence[PodRecord]) -> str:
    return f"gang {gang} waits for {len(remaining)} preempted pod(s) to end, e.g. {_pod(remaining[0])}"


def evictions_failed(gang: GangKey, failed: Sequence[tuple[str, str]], retry_seconds: float) -> str:
    """``failed``: (namespace/name, why) of each pod not evicted."""
    shown = "; ".join(f"{pod}: {why}" for pod, why in failed[:3])
    return (f"gang {gang}: {len(failed)} eviction(s) failed ({shown}); the place it reserved is dropped and it "
            f"tries again in {retry_seconds:.0f}s at the earliest")


# ------------------------------------------------------------------------------ the barrier
def already_held(pod: PodRecord) -> str:
    return f"pod {_pod(pod)} is already waiting at its gang barrier"


def bind_too_late(pod: PodRecord) -> str:
    return (f"bind of pod {_pod(pod)} reached gang-extender too late to be held (kube-scheduler's httpTimeout less "
            "the answer margin had passed); kube-scheduler retries it")


def holding(held: int, placed: int, min_count: int) -> str:
    return f"holding {held} bind(s); {placed}/{min_count} members placed"


def still_gathering(gang: GangKey, placed: int, min_count: int, since_last_new: float) -> str:
    """Holds recycled before kube-scheduler's timeout while the gang still gathers members."""
    return (f"gang {gang} is still gathering members ({placed}/{min_count} placed, the last new one "
            f"{since_last_new:.0f}s ago): its held binds are answered before kube-scheduler's httpTimeout; each "
            "keeps its reserved place and kube-scheduler retries it")


def quorum_overdue(holds: int) -> str:
    return (f"quorum reached but {holds} hold(s) had no time left before kube-scheduler's timeout; waiting for "
            "them to come back")


def release_aborted(gang: GangKey, problem: str) -> str:
    return (f"gang {gang} was not released: {problem}; nothing of the gang was bound, its reservation is dropped "
            "and it is planned again when kube-scheduler retries its members")


def member_node_gone(pod: PodRecord, node: str) -> str:
    return f"member {_pod(pod)}: node {node} no longer exists"


def member_no_longer_fits(pod: PodRecord, node: str, reason: str) -> str:
    return f"member {_pod(pod)} no longer fits node {node}: {reason}"


def member_node_overcommitted(pod: PodRecord, node: str, resource: str, used: int, allocatable: int) -> str:
    return (f"member {_pod(pod)}: node {node} is over-committed in {resource} (placed and held "
            f"{describe({resource: used})}, allocatable {describe({resource: allocatable})}): another binder "
            "placed a pod there after this gang was admitted")


def node_unknown_at_bind(node: str) -> str:
    return f"node {node} is not known to the extender"


def does_not_fit(pod: PodRecord, node: str, reason: str) -> str:
    return f"pod {_pod(pod)} does not fit node {node}: {reason}"


def no_room_left(pod: PodRecord, node: str, resource: str, free: Mapping[str, int]) -> str:
    return (f"node {node} no longer has room for pod {_pod(pod)}: insufficient {resource} (needs "
            f"{describe({resource: pod.requests[resource]})}, free {describe({resource: free.get(resource, 0)})})")


def outside_domain(node: str, gang: GangKey | None, domain: object) -> str:
    return f"node {node} is outside gang {gang}'s topology domain {domain}"


QUORUM_BOUND = "quorum reached: members bound"


def release_partly_failed(failed: int) -> str:
    return (f"quorum released but {failed} Binding(s) failed: their places stay reserved until kube-scheduler "
            "retries them")


def bind_failed(gang: GangKey, error: str) -> str:
    return (f"gang {gang}: {error}; members already bound stay bound (a Binding cannot be undone) and "
            "kube-scheduler retries this one")


def bound_together(gang: GangKey, bound: int) -> str:
    return f"gang {gang}: {bound} member(s) bound together at quorum"


def released_after_policy_change(holds: int) -> str:
    return f"quorum reached after a policy change: binding {holds} held member(s)"


def already_bound(pod: PodRecord, node: str) -> str:
    return f"pod {_pod(pod)} is already bound to {node}"


def release_resumed_by_leader(gang: GangKey, members: int) -> str:
    return (f"gang {gang}: the previous gang-extender leader was binding this gang's quorum when it stopped; the "
            f"remaining {members} member(s) bind as soon as kube-scheduler retries them")


def release_resumed_after_restart(gang: GangKey, members: int) -> str:
    return (f"gang {gang}: gang-extender restarted while binding this gang's quorum; it bound the remaining "
            f"{members} member(s) to the nodes kube-scheduler had chosen")


# -------------------------------------------------------------------------------- timeouts
def timed_out_held(gang: GangKey, timeout: float, held: int, min_count: int) -> str:
    return (f"gang {gang} timed out after {timeout:g}s with {held} member(s) held of {min_count} needed; released "
            "its reservation and backing off")


def never_offered(nodes: Sequence[str]) -> str:
    return f"; kube-scheduler never offered its reserved node(s) {_shown(nodes)}: the next plans avoid them"


# ------------------------------------------------------------------- the filter-gated mode
def never_binds(namespace: str, name: str) -> str:
    return (f"pod {namespace}/{name} was not bound: gang-extender runs filter-gated (--bind-mode filter-gated) and "
            "never binds; remove bindVerb from its extenders entry")


def no_place_left(gang: GangKey) -> str:
    return (f"no place in gang {gang}'s reservation is left for it (the others are claimed by members being bound, "
            "or gang-extender has not seen this pod yet)")


def gated_progress(bound: int, min_count: int) -> str:
    return f"admitted: {bound}/{min_count} members bound by the binder (filter-gated mode)"


def gated_complete(bound: int) -> str:
    return f"quorum reached: {bound} members bound by the binder (filter-gated mode)"


def timed_out_bound(gang: GangKey, timeout: float, bound: int, min_count: int) -> str:
    return (f"gang {gang} timed out after {timeout:g}s with {bound} of {min_count} members bound; released its "
            "reservation and backing off")


def never_bound_there(nodes: Sequence[str]) -> str:
    return f"; members sent to {', '.join(nodes[:5])} were never bound there: the next plans avoid them"


def partly_bound(gang: GangKey, bound: int, min_count: int, timeout: float) -> str:
    return (f"gang {gang} is partly bound: {bound} of {min_count} members are bound and the rest were not bound "
            f"within {timeout:g}s (filter-gated mode has no bind-time barrier, and a Binding cannot be undone); "
            "the rest are planned again around the bound members after the back-off")


# ------------------------------------------------------------------------ per-node verdicts
NODE_NOT_WATCHED = "node is not known to gang-extender (its node watch has not seen it)"


def insufficient(resource: str) -> str:
    return f"Insufficient {resource}"


def insufficient_reserved(resource: str) -> str:
    return f"Insufficient {resource}: capacity is reserved for other gangs"


def outside_gang_domain(domain: object, gang: GangKey | None) -> str:
    return f"outside the topology domain {domain} of gang {gang}"


def invalid_gang(problem: object) -> str:
    return f"invalid gang: {problem}"


# ------------------------------------------------------------------------------ the bind verb
def pod_unknown_no_time(namespace: str, name: str) -> str:
    return f"pod {namespace}/{name} is not known yet and the request has no time left"


def pod_unreadable(namespace: str, name: str, problem: object) -> str:
    return f"cannot read pod {namespace}/{name}: {problem}"


def pod_missing(namespace: str, name: str) -> str:
    return f"pod {namespace}/{name} does not exist"


def pod_malformed(namespace: str, name: str, problem: object) -> str:
    return f"pod {namespace}/{name} cannot be read: {problem}"


def scheduler_not_served(pod: PodRecord, served: frozenset[str]) -> str:
    return (f"pod {_pod(pod)} has schedulerName {pod.scheduler_name!r}, which gang-extender does not serve "
            f"(--scheduler-names {','.join(sorted(served))})")


def uid_mismatch(pod: PodRecord, requested: str) -> str:
    return f"pod {_pod(pod)} has uid {pod.uid}, not {requested}: it was re-created"


LOST_LEADERSHIP_ANSWERING = "this gang-extender replica lost its leadership while answering; kube-scheduler retries"


def binding_not_attempted_late(pod: PodRecord, node: str) -> str:
    return (f"binding pod {_pod(pod)} to {node} was not attempted: kube-scheduler's httpTimeout for this request had "
            "(almost) passed; it retries the pod")


def binding_not_attempted_deposed(pod: PodRecord) -> str:
    return (f"binding pod {_pod(pod)} was not attempted: this gang-extender replica lost its leadership during the "
            "release; kube-scheduler retries it")


def binding_failed(pod: PodRecord, node: str, problem: object) -> str:
    return f"binding pod {_pod(pod)} to {node} failed: {problem}"


def release_not_recorded(gang: GangKey, problem: object) -> str:
    return f"gang {gang} was not released: {problem}; nothing was bound and kube-scheduler retries its members"


RESUME_GONE = "gone (deleted or re-created)"
RESUME_ALREADY_BOUND = "already bound"
RESUME_NEEDS_PREPARATION = "needs volume or claim preparation: passes the barrier at its next bind"


# ---------------------------------------------------------------------------- the preempt verb
PREEMPT_NODE_UNKNOWN = "node is not known to gang-extender"
PREEMPT_NO_VICTIMS = "no victims on the node (kube-scheduler rejects an extender's node without victims)"


def preemptor_group_unseen(gang: GangKey) -> str:
    return f"gang {gang} is not defined yet (its group object has not been seen)"


def preemptor_incomplete(gang: GangKey, placed: int, min_count: int) -> str:
    return (f"gang {gang} is not complete ({placed}/{min_count} members placed): preempting for one member would "
            "evict pods for a gang that still cannot run")


def victim_unknown(uid: str) -> str:
    return f"victim {uid[:64]!r} is not a pod gang-extender knows on this node"


def victim_in_gang(gang: GangKey, defined: bool) -> str:
    what = "a gang" if defined else "a gang whose group is not seen yet"
    return f"victims include a member of {what} ({gang}): kube-scheduler's per-pod preemption would split it"
