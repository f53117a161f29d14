"""gang-extender: a kube-scheduler extender for gang scheduling and filter-result reuse."""
