"""The engine: the extender verbs (filter, prioritize, bind, preempt) as use cases over the mirror, the
filter cache and the gang ledger, composed behind ``verbs.Engine``; and the ports (Binder, ReleaseLog,
Evictor) the I/O edges implement.

Must not: parse HTTP or import an API client.
"""
