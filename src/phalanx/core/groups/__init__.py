"""Gang dialects: the APIs a pod's gang may be declared in, turned into the core's
`PodGroup`, and the status each dialect reports in its own terms.

* `registry` — the dialects in precedence order, a pod's membership, any gang object,
  resolving a `GroupRef`, status writes and Events' objects;
* `scheduler_plugins`, `annotations`, `upstream`, `volcano`, `kai`, `grove`, `kueue`,
  `yunikorn`, `lws` — one module per dialect;
* `status` — `GroupStatus` and `GroupPhase`, what Phalanx reports before a dialect spells it;
* `discovery` — which dialect kinds and versions the API server serves, and their paths;
* `coexistence` — which kube-scheduler profiles leave its own gang scheduling on;
* `common` — names, Phalanx's own settings on group objects, shared value types.

Pure, like the rest of the core: plain dicts in, values out, no I/O.
"""
