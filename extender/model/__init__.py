"""The bottom layer: the values every other layer passes around and the words it uses.

``quantity`` (resource amounts), ``gang`` (the gang vocabulary: keys, policies, phases, verdicts),
``cluster`` (node and pod records) and ``messages`` (every sentence users read about scheduling).

Must not: hold state, do I/O, or import anything above it.
"""
