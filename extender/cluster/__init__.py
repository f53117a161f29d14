"""The cluster as the extender sees it: the mirror of nodes, pods and groups (with used capacity, and
the reserved capacity the gang ledger sets), the compact records parsed from raw objects, node
predicates and per-node verdicts, scheduling signatures, the filter cache and the group sources.

Must not: know about gang rules or the verbs, keep gang state, or do I/O.
"""
