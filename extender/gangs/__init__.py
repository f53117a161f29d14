"""Gangs: one record per gang and the parts that act on it, composed behind ``ledger.GangLedger``.

The record (``record``) is kept by the ``registry``, whose apply step is the only code that changes what
a gang holds (its reservation, its holds) together with the mirror's view of it. The parts decide and
return ``effects.Decision`` values: ``admission`` (quorum gate, plan, reserve), ``barrier`` (hold,
release, outcome), ``expiry`` (deadlines, back-off), ``policies`` (group policy changes), ``queue`` (the
order, draining), ``preemption`` (victims for the head gang), ``bind_modes`` (barrier or filter-gated, a
strategy), with shared reads (``placement``) and steps (``attempts``); ``view`` is the read-only side for
metrics and explain. Pure helpers: ``planner``, ``domains``, ``victims``, ``order``, ``explanation``.

Must not: do I/O or block; only the records keep state, and the parts read the clock they are given.
"""
