"""``kubectl gang``: the kubectl plugin (``kubectl-gang``): gangs read from the API server only."""
