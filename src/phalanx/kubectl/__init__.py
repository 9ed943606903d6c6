"""`kubectl phalanx`: what the cluster and a running Phalanx say about gangs, from a laptop.

The package installs the `kubectl-phalanx` executable, which kubectl runs as the plugin
`kubectl phalanx ...` (any executable called `kubectl-<name>` on the PATH is one):

* `views` — raw API objects (PodGroups, pods, Events, Leases) into frozen views; pure;
* `render` — those views as kubectl-style tables, or JSON;
* `cluster` — the kubeconfig as kubectl reads it, and the reads through the API and from
  a Phalanx's `/debug`;
* `plugin` — the commands (`explain`, `status`, `simulate`) and their exit codes.
"""
