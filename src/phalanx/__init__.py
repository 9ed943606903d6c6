"""Phalanx: all-or-nothing gang scheduling for GPU clusters, as a kube-scheduler extender."""
