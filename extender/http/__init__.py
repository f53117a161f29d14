"""The HTTP edge: the Flask app, the verbs' routes, the Prometheus metrics and the gunicorn worker that
reads every request whole before a thread sees it.

Owns: everything that knows HTTP, and the only imports of Flask and gunicorn. Must not: decide
anything about scheduling; it hands parsed arguments to the engine and renders what comes back.
"""
