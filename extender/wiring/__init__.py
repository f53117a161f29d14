"""Wiring: builds the mirror, cache, ledger and engine over the API server (or a snapshot), runs the
background pieces (discovery, the watches feeding the mirror, sweeper, status rendering and Event
routing) and ties leadership to the verbs.

Owns: composition and readiness. Must not: serve HTTP or decide gang rules.
"""
