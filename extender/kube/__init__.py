"""The Kubernetes API edge: the raw JSON client, list+watch reflectors, Events, wake-ups and group
status writers, the Binding adapter, the Lease elector and the release intents written on it.

Owns: every call to the API server, and the only import of the kubernetes client. Must not: decide
scheduling or gang rules.
"""
