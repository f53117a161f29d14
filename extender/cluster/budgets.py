"""DisruptionBudgets: the PodDisruptionBudgets of the cluster, and whether evicting a set of pods at
once stays within all of them (pure: no I/O).

Owns: one compact ``Budget`` per policy/v1 PodDisruptionBudget, keyed by (namespace, name), fed by
watch events (``upsert``/``delete``/``replace``); ``labels_match``, the label selector semantics of
metav1.LabelSelector; and ``allowed``, the answer the Eviction API would give to a whole set of
evictions. Must not: call the API server, evict, or choose victims.

What ``allowed`` reproduces of the Eviction API (pkg/registry/core/pod/storage/eviction.go):
- a budget selects pods of its own namespace; a null selector selects none, an empty one (``{}``)
  selects every pod of the namespace (policy/v1);
- a budget whose status has not been computed for its current generation (observedGeneration below
  metadata.generation, or no status yet) refuses every eviction of a pod it selects;
- a pod selected by more than one budget cannot be evicted at all (the API server answers 500);
- terminal pods (Succeeded, Failed, being deleted) are evicted without consulting any budget.
Where the API server lets more through (a Pending pod is deleted without a budget check), this is
stricter: bound pods are counted whatever their phase, which the mirror does not keep.

Thread safety: every method takes ``self._lock`` (a leaf lock: nothing is called while holding it),
so ``allowed`` may be called with the mirror's lock held.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from extender.errors import ObjectError
from extender.model import messages
from extender.model.cluster import PodRecord, Requirement

BudgetKey = tuple[str, str]  # (namespace, name)


@dataclass(frozen=True, slots=True)
class Selector:
    """A metav1.LabelSelector: every ``match_labels`` pair and every requirement must hold."""

    match_labels: tuple[tuple[str, str], ...] = ()
    expressions: tuple[Requirement, ...] = ()


@dataclass(frozen=True, slots=True)
class Budget:
    """What ``allowed`` needs of one PodDisruptionBudget."""

    namespace: str
    name: str
    selector: Selector | None  # None: a null selector, which selects no pod
    disruptions_allowed: int | None  # None: its status is not observed for its current generation

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})


def labels_match(selector: Selector | None, labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` satisfy ``selector`` (metav1.LabelSelectorAsSelector): None selects nothing,
    an empty selector everything; an unknown operator selects nothing (the API server refuses to
    build such a selector and then skips the budget)."""
    if selector is None:
        return False
    for key, value in selector.match_labels:
        if labels.get(key) != value:
            return False
    for req in selector.expressions:
        present = req.key in labels
        op = req.operator
        if op == "In":
            ok = present and labels[req.key] in req.members
        elif op == "NotIn":
            ok = not present or labels[req.key] not in req.members
        elif op == "Exists":
            ok = present
        elif op == "DoesNotExist":
            ok = not present
        else:
            return False
        if not ok:
            return False
    return True


def _dict(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _selector(raw: object) -> Selector | None:
    if not isinstance(raw, dict):
        return None
    labels = _dict(raw.get("matchLabels"))
    expressions = []
    for item in raw.get("matchExpressions") or []:
        if not isinstance(item, dict):
            continue
        values = item.get("values")
        expressions.append(Requirement(str(item.get("key") or ""), str(item.get("operator") or ""),
                                       tuple(str(v) for v in values) if isinstance(values, list) else ()))
    return Selector(tuple(sorted((str(k), str(v)) for k, v in labels.items())), tuple(expressions))


def budget_record(obj: Mapping[str, Any]) -> Budget:
    """A ``Budget`` of a raw policy/v1 PodDisruptionBudget. Raises ObjectError without a name."""
    meta, spec, status = _dict(obj.get("metadata")), _dict(obj.get("spec")), _dict(obj.get("status"))
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ObjectError("PodDisruptionBudget has no metadata.name")
    allowed = status.get("disruptionsAllowed")
    observed = status.get("observedGeneration") or 0
    generation = meta.get("generation") or 0
    if not (isinstance(allowed, int) and isinstance(observed, int) and isinstance(generation, int)
            and observed >= generation):
        allowed = None  # not computed for this generation (a new budget's status reads 0 until it is)
    return Budget(str(meta.get("namespace") or "default"), name, _selector(spec.get("selector")), allowed)


class DisruptionBudgets:
    """The PodDisruptionBudgets of the cluster, by namespace."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_namespace: dict[str, dict[str, Budget]] = {}

    def upsert(self, obj: Mapping[str, Any]) -> Budget:
        budget = budget_record(obj)
        with self._lock:
            self._by_namespace.setdefault(budget.namespace, {})[budget.name] = budget
        return budget

    def delete(self, namespace: str, name: str) -> None:
        with self._lock:
            budgets = self._by_namespace.get(namespace)
            if budgets is not None:
                budgets.pop(name, None)
                if not budgets:
                    del self._by_namespace[namespace]

    def replace(self, objs: Iterable[Mapping[str, Any]]) -> None:
        """A full list: exactly these budgets from now on (a malformed object is skipped)."""
        fresh: dict[str, dict[str, Budget]] = {}
        for obj in objs:
            try:
                budget = budget_record(obj)
            except ObjectError:
                continue
            fresh.setdefault(budget.namespace, {})[budget.name] = budget
        with self._lock:
            self._by_namespace = fresh

    def __len__(self) -> int:
        with self._lock:
            return sum(len(budgets) for budgets in self._by_namespace.values())

    def copy(self) -> DisruptionBudgets:
        """The budgets as they are now, with a lock of their own (what-if questions read the copy)."""
        copied = DisruptionBudgets()
        with self._lock:
            copied._by_namespace = {namespace: dict(budgets) for namespace, budgets in self._by_namespace.items()}
        return copied

    def get(self, namespace: str, name: str) -> Budget | None:
        with self._lock:
            return self._by_namespace.get(namespace, {}).get(name)

    def selecting(self, pods: Sequence[PodRecord]) -> list[tuple[Budget, int]]:
        """The budgets that select any of ``pods`` (terminal pods left out), each with how many it selects,
        by namespace and name."""
        counts: dict[BudgetKey, tuple[Budget, int]] = {}
        with self._lock:
            for pod in pods:
                if pod.terminal:
                    continue
                labels = dict(pod.labels)
                for budget in self._by_namespace.get(pod.namespace, {}).values():
                    if labels_match(budget.selector, labels):
                        key = (budget.namespace, budget.name)
                        counts[key] = (budget, counts.get(key, (budget, 0))[1] + 1)
        return [counts[key] for key in sorted(counts)]

    def allowed(self, pods: Sequence[PodRecord]) -> tuple[bool, str]:
        """Whether evicting all of ``pods`` at once stays within every budget that selects any of them;
        when not, the reason names the budget."""
        counts: dict[BudgetKey, int] = {}
        found: dict[BudgetKey, Budget] = {}
        with self._lock:
            for pod in pods:
                if pod.terminal:
                    continue
                budgets = self._by_namespace.get(pod.namespace)
                if not budgets:
                    continue
                labels = dict(pod.labels)
                selecting = [b for b in budgets.values() if labels_match(b.selector, labels)]
                if len(selecting) > 1:
                    names = ", ".join(sorted(str(b) for b in selecting))
                    return False, messages.several_budgets(pod, names)
                for budget in selecting:
                    key = (budget.namespace, budget.name)
                    counts[key] = counts.get(key, 0) + 1
                    found[key] = budget
        for key in sorted(counts):
            budget, count = found[key], counts[key]
            if budget.disruptions_allowed is None:
                return False, messages.budget_not_computed(budget)
            if count > budget.disruptions_allowed:
                return False, messages.budget_exceeded(count, budget, budget.disruptions_allowed)
        return True, ""
