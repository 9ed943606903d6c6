"""The demo and the simulator: a built-in GPU cluster and workload, a stand-in for
kube-scheduler that drives Phalanx over HTTP, and the summary of a run.

* `cluster`, `workload` — the built-in objects (`objects` holds the builders).
* `scenario` — one served, driven run (the servers are `phalanx.api.server`'s).
* `driver` — the kube-scheduler stand-in; `report` — the summary, text or JSON.
"""
