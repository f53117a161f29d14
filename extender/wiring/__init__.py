"""Wiring: builds the mirror, cache, ledger and engine over the API server (or a snapshot), runs the
background pieces (discovery, sweeper, status rendering) and ties leadership to the verbs.

Owns: composition and readiness. Must not: serve HTTP or decide gang rules.
"""
