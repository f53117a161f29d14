"""The cluster as the extender sees it: the mirror of nodes, pods and groups (with used and reserved
capacity), the compact records parsed from raw objects, node predicates, scheduling signatures, the
filter cache, group sources, value types and resource quantities.

Must not: know about gang rules or the verbs, or do I/O.
"""
