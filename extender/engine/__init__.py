"""The engine: the extender verbs (filter, prioritize, bind) as use cases over the mirror, the filter
cache and the gang ledger, and the ports (Binder, ReleaseLog) the I/O edges implement.

Must not: parse HTTP or import an API client.
"""
