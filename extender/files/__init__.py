"""The file edge: the release journal, the request recording, cluster snapshots, and the
append-only line file the first two are written through.

Owns: what is read from and written to local files. Must not: decide scheduling or gang rules.
"""
