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

from extender.model.cluster import PodRecord, Taint
from extender.model.gang import GangKey, GroupKind
from extender.model.quantity import CPU, describe

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


# ----------------------------------------------------------- refusals: no verb is served now
NOT_SYNCED = ("gang-extender is starting: its first list of nodes, pods and group objects is not complete; "
              "kube-scheduler will retry")
NOT_LEADER = ("this gang-extender replica is not the leader (it is competing for the Lease, or another replica "
              "holds it): kube-scheduler will retry")


def api_silent(seconds: float) -> str:
    """The API server has not answered the probe for ``seconds``."""
    return (f"the API server has not answered gang-extender for {seconds:.0f}s: its view of the cluster may be "
            "stale; kube-scheduler will retry")


def watch_failing(watch: str, seconds: float, error: str) -> str:
    """A core watch (nodes, pods) has been failing for ``seconds``; ``error``: its last error ("" if none)."""
    return (f"gang-extender's {watch} watch has been failing for {seconds:.0f}s ({error or 'no detail'}): its "
            "view of the cluster may be stale; kube-scheduler will retry")


# ----------------------------------------------------------- group objects: malformed fields
def object_named(kind: str, namespace: str, name: str) -> str:
    """How a message names an object: ``Workload ml/train``, ``pod ml/worker-0``."""
    return f"{kind} {namespace}/{name}"


def field_of(where: str, field: str) -> str:
    """A field of the object ``where`` names: ``PodGroup ml/train: spec.minMember``."""
    return f"{where}: {field}"


def no_name(kind: str) -> str:
    return f"{kind} has no metadata.name"


def not_a_list(field: str) -> str:
    return f"{field} must be a list"


def not_an_object(field: str) -> str:
    return f"{field} must be an object"


def field_missing(field: str) -> str:
    return f"{field} is missing"


def not_positive_integer(field: str, raw: object) -> str:
    return f"{field} must be a positive integer, got {raw!r}"


def seconds_not_a_number(annotation: str, raw: object) -> str:
    return f"{annotation} must be a number of seconds, got {raw!r}"


def seconds_not_positive(annotation: str, raw: object) -> str:
    return f"{annotation} must be a positive number of seconds, got {raw!r}"


def min_count_missing(group_annotation: str, min_count_annotation: str) -> str:
    return f"pod has {group_annotation} but no {min_count_annotation} annotation"


# ---------------------------------------- group objects: order settings the defaults replace
def priority_not_integer(raw: object) -> str:
    return f"spec.priority must be an integer, got {str(raw)[:64]!r}"


def priority_class_unresolved(priority_class: str) -> str:
    return (f"priorityClassName {priority_class!r} did not resolve to a priority (does the PriorityClass exist?): "
            "the members' pod priority applies")


def max_wait_invalid(annotation: str, raw: object) -> str:
    return (f"{annotation} must be a number of seconds >= 0, got {str(raw)[:64]!r}: the extender's "
            "--max-wait-seconds applies")


# ---------------------------------------------------------------------- topology constraints
TOPOLOGY_GROUP_AND_PODS = "the group object and its pods"
"""Whose keys differ when the group object's constraint and its members' disagree."""


def field_problem(field: str, problem: str) -> str:
    """What is wrong with a field (``field_of``, ``topology_annotation``): ``<field>: <problem>``."""
    return f"{field}: {problem}"


def topology_annotation(where: str, annotation: str) -> str:
    """An annotation of the object ``where`` names, as a field: ``pod ml/w-0: annotation <name>``."""
    return f"{where}: annotation {annotation}"


def constraints_not_object(where: str, raw: object) -> str:
    return f"{where}: spec.schedulingConstraints must be an object, got {raw!r}"


def topology_not_list(where: str, field: str, raw: object) -> str:
    return f"{where}: {field} must be a list, got {raw!r}"


def topology_too_many(where: str, field: str, entries: int) -> str:
    return f"{where}: {field} has {entries} entries; at most one is allowed"


def topology_entry_not_object(where: str, field: str, entry: object) -> str:
    return f"{where}: {field}[0] must be an object with a key, got {entry!r}"


def topology_keys_differ(what: str, mode: str, first: str, first_source: object, second: str,
                         second_source: object) -> str:
    """Two different ``mode`` ("required", "preferred") keys for one gang, and where each was written."""
    return (f"{what}: two different {mode} topology keys: {first!r} ({first_source}) and {second!r} "
            f"({second_source})")


def members_disagree(mode: str, first_pod: str, first: str, pod: str, key: str) -> str:
    return f"members disagree on the {mode} topology key: pod {first_pod} has {first!r}, pod {pod} has {key!r}"


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


# ------------------------------------------------------- why the rest of a gang does not fit
NO_NODE_MATCHES = "no node matches its nodeSelector, affinity and tolerations"


def no_node_has_free(needed: Mapping[str, int], short: Mapping[str, int]) -> str:
    """``needed``: the requests no node has enough of; ``short``: how far the largest free falls short."""
    return f"no node has {describe(needed)} free (largest free falls short by {describe(short)})"


def no_node_has_at_once(requests: Mapping[str, int]) -> str:
    return f"no node has {describe(requests)} free at once"


# -------------------------------------------------------------------------- topology domains
ACROSS_DOMAINS = "across domains"
"""The name of the domain of every node (a plan that keeps to no domain)."""
DOMAIN_LACKS_BOUND_MEMBERS = "does not hold the gang's bound members"


def bound_node_unlabelled(node: str, label: str) -> str:
    return f"a bound member's node {node} has no label {label}"


def bound_in_two_domains(first: object, second: object) -> str:
    return f"bound members are in two domains: {first} and {second}"


def bound_domain_has_no_nodes(domain: object) -> str:
    return f"the bound members' domain {domain} has none of the nodes"


def domain_lacks_free_cpu(free: int, needed: int) -> str:
    """What a domain lacks (``lacks``): its free cpu (milli-cpu) is below the gang's."""
    return f"has {describe({CPU: free})} free of the {describe({CPU: needed})} needed"


def domain_lacks_allocatable_cpu(allocatable: int, needed: int) -> str:
    """What the largest domain lacks even when empty: its allocatable cpu (milli-cpu) is below the gang's."""
    return f"has {describe({CPU: allocatable})} allocatable of the {describe({CPU: needed})} needed"


def domain_fits_some(placed: int, members: int, blocking: str) -> str:
    return f"{placed} of {members} members fit: {blocking}"


def no_node_labelled(keys: Sequence[str]) -> str:
    return f"no node has the label {', '.join(keys)}"


def no_domain_can_hold(key: str, why: str) -> str:
    return f"no {key} domain can hold the gang: {why}"


def no_domain_holds_all(key: str, members: int, roomiest: object, nodes: int, lacks: str) -> str:
    return f"no {key} domain holds all {members} of them; the roomiest, {roomiest} ({nodes} nodes), {lacks}"


def no_domain_even_empty(key: str, members: int, largest: object, nodes: int, lacks: str) -> str:
    return (f"no {key} domain can hold all {members} members even when empty; the largest, {largest} "
            f"({nodes} nodes), {lacks}")


def placed_in_domain(domain: object, constraint: str) -> str:
    """Where a constrained gang was placed, appended to a message (``where``): `` in <domain> (<constraint>)``."""
    return f" in {domain} ({constraint})"


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


NOT_FULLY_LISTED = "the cluster is not fully listed yet"
BUDGETS_NOT_WATCHED = "the PodDisruptionBudget watch is not listed or not healthy"
NOT_LEADING = "this replica does not lead"
NO_VICTIMS = "no lower-priority victims"


def no_victims(reasons: Sequence[str]) -> str:
    """Why no running unit may be a victim: ``reasons`` (``units_...``), or that none runs."""
    return f"{NO_VICTIMS}: {'; '.join(reasons)}" if reasons else f"{NO_VICTIMS}: no running units"


def units_not_lower(units: int, priority: int) -> str:
    return f"{units} running unit(s) have priority {priority} or higher"


def units_not_evictable(units: int, first: str, why_not: str) -> str:
    """``first``: the first such unit (``unit_...``), ``why_not`` why it may not be evicted ("": not told)."""
    return f"{units} may not be evicted ({first}: {why_not or 'not evictable'})"


def units_on_unusable_nodes(units: int) -> str:
    return f"{units} run only on nodes none of the members can use"


def victims_not_enough(units: int, pods: int, placed: int, chosen: int, blocking: str) -> str:
    return (f"even evicting every eligible unit ({units} units, {pods} pods) leaves {placed}/{chosen} members "
            f"placed: {blocking}")


NOT_LEADING_EVICTS_NOTHING = "this replica does not lead: it evicts nothing"


def rate_bound_no_room(per_minute: float, evictions: int) -> str:
    return f"the eviction rate bound ({per_minute:.0f} a minute) has no room for {evictions} eviction(s) now"


def preempted_by(preemptor: str, reason: str) -> str:
    """The Warning Event ``Preempted`` on each evicted victim."""
    return f"preempted by {preemptor}: {reason}"


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


# ------------------------------------------------------- a node the pod's placement excludes
NODE_SELECTOR_MISMATCH = "node does not match the pod's nodeSelector"
NODE_AFFINITY_MISMATCH = "node does not match the pod's required node affinity"


def untolerated_taint(taint: Taint) -> str:
    return f"node has untolerated taint {taint.key}={taint.value}:{taint.effect}"


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


# ----------------------------------------------------------------------------------- explain
OTHER_NAMESPACE = "(another namespace)"
"""What a published form says in place of a gang or pod of another namespace (its readers may see only theirs)."""
NO_NODE_MATCHES_MEMBERS = "no node matches the members' nodeSelector, affinity and tolerations"
NO_ROOM_AT_ONCE = "no node has room for a member at once"


def members_need(members: int, resource: str, needed: int, free: int) -> str:
    """A shortfall over the cluster: ``members`` need ``needed`` of ``resource``, ``free`` is free in total."""
    return f"{members} member(s) need {describe({resource: needed})}, {describe({resource: free})} is free"


def fragmented(resource: str, amount: int) -> str:
    """A shortfall on one node: enough in total, but no node has ``amount`` of ``resource`` for one member."""
    return f"enough in total, but no node has {describe({resource: amount})} free for one member"


def state_summary(gang: object, state: object, existing: object, bound: object, held: object, min_count: object,
                  why: str) -> str:
    """The ``GangState`` Event's one line: members existing, bound and held; ``why`` may be ""."""
    line = (f"gang {gang}: {state}; {existing} member(s) exist, {bound} bound, {held} held; "
            f"minCount {min_count}")
    return f"{line}; {why}" if why else line


# --------------------------------------------------------------------------- the order, more
def priority_differs_from_group(priorities: str, stated: int) -> str:
    return (f"its members' pod priority ({priorities}) differs from the group's priority {stated}: ordered by the "
            "lowest, and it never preempts")


def member_priorities_differ(priorities: str) -> str:
    return f"its members have different priorities ({priorities}): ordered by the lowest, and it never preempts"


# ------------------------------------------------------------------------- evictions, more
EVICTOR_NOT_LEADING = "this replica no longer leads"


def eviction_outcome(outcome: str, detail: str) -> str:
    """Why one victim was not evicted: its outcome (``refused-budget``, ``failed``, ...) and the detail."""
    return f"{outcome}: {detail}" if detail else outcome


def several_budgets(pod: PodRecord, budgets: str) -> str:
    return (f"pod {_pod(pod)} is selected by more than one PodDisruptionBudget ({budgets}): the Eviction API refuses "
            "to evict it")


def budget_not_computed(budget: object) -> str:
    return (f"PodDisruptionBudget {budget} has no status for its current generation yet (the disruption controller "
            "has not computed it): it allows no eviction")


def budget_exceeded(pods: int, budget: object, allowed: int) -> str:
    return (f"evicting {pods} pod(s) selected by PodDisruptionBudget {budget} exceeds the {allowed} disruption(s) it "
            "allows now")


# ------------------------------------------------------------------- releases written down
def intent_not_leader(gang: GangKey) -> str:
    return f"release of gang {gang} not recorded: this replica is not the leader"


def intent_not_written(gang: GangKey, problem: object) -> str:
    return f"release of gang {gang} not recorded: {problem}"


def intents_too_large(gang: GangKey, size: int, most: int) -> str:
    return (f"release of gang {gang} not recorded: the open releases would take {size} bytes, more than "
            f"release-intents-max-bytes ({most})")


def lease_annotations_too_large(gang: GangKey, total: int, limit: int) -> str:
    return (f"release of gang {gang} not recorded: the Lease's annotations would take {total} bytes, more than the "
            f"API server's limit ({limit})")


# ---------------------------------------------------------------------------- snapshot mode
def pod_not_in_snapshot(namespace: str, name: str) -> str:
    return f"pod {namespace}/{name} is not in the snapshot"


def node_not_in_snapshot(node: str) -> str:
    return f"node {node} is not in the snapshot"


# ------------------------------------------------------------------- members that go away
def held_member_gone(pod: PodRecord) -> str:
    return (f"pod {_pod(pod)} (uid {pod.uid}) was deleted, re-created or finished while its bind was held at its "
            "gang's barrier: it no longer counts toward the quorum")


def held_members_gone(count: int) -> str:
    return (f"{count} held member(s) were deleted, re-created or finished before the quorum was released: the gang "
            "waits for members that exist")


def release_partly_bound(gang: GangKey, bound: int, released: int, error: str) -> str:
    return (f"gang {gang} is partly bound: {bound} of the {released} members released together were bound and the "
            f"API server refused the rest ({error}); a Binding cannot be undone, so the refused members keep their "
            "reserved places and are bound when kube-scheduler retries them (or the pods that replace them come)")


def quorum_too_late(gang: GangKey, late: int, margin: float) -> str:
    return (f"gang {gang} reached its quorum but {late} hold(s) had less than {margin:.1f}s left before "
            "kube-scheduler's timeout, the time a release needs to be written down and bound: all of its held "
            "binds are answered together and come back together; each keeps its reserved place")


def pod_not_seen(uid: str) -> str:
    return (f"pod uid {uid[:64]!r} is not known to gang-extender yet (its pod watch has not delivered it): nothing "
            "is decided for it until it is; kube-scheduler retries it")


RESUME_ABANDONED = ("none of the release's Bindings had been made: the release is dropped and the gang forms again "
                    "at the barrier")


def release_abandoned(gang: GangKey, members: int) -> str:
    return (f"gang {gang}: the gang-extender that was releasing this gang's quorum stopped before any of its "
            f"{members} Binding(s) was made (the API server shows none of them bound): the release is dropped and "
            "the gang forms again at the barrier")


def no_room_after_victims(node: str, resource: str, requests: Mapping[str, int], free: Mapping[str, int]) -> str:
    return (f"the preemptor would not fit on node {node} even once these victims are gone: insufficient {resource} "
            f"(needs {describe({resource: requests[resource]})}, {describe({resource: free.get(resource, 0)})} would "
            "be free; the rest is reserved for other gangs or used by pods that stay)")


def victim_partly_evicted(unit: str, went: int, of: int, why: str) -> str:
    return (f"{unit} was evicted as a unit for a higher-priority gang, but only {went} of its {of} pod(s) went: the "
            f"rest were refused ({why}) after retries; a disruption budget or the API server keeps them")
