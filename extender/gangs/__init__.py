"""Gangs: the rules and messages, the placement planner, the ledger (each gang's lifecycle) and the
view ``/explain`` shows.

Must not: do I/O or block; only the ledger keeps state, and it reads the clock it is given.
"""
