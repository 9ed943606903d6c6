"""Execution plans (`phalanx.io/plan`): the public face of the plan modules.

* `plan_tree` — parse the annotation into a `PlanNode` tree; its members and data flow.
* `plan_intent` — the `PlanIntent` a plan asks of the gang engine (hard units, soft
  together / apart / round-robin rules, required tags) and a check of the hard rules.
* `plan_outcome` — `describe` a finished placement: phases, data transfers, warnings.

Callers import from here; the split is by concern, not an API boundary.
"""

from phalanx.core.plan_intent import (
    PlanIntent,
    TogetherRule,
    derive_intent,
    hard_rule_violations,
    tags_from_labels,
    together_rules,
)
from phalanx.core.plan_outcome import (
    PARALLEL,
    SEQUENTIAL,
    TRIAL,
    DataTransfer,
    PlanOutcome,
    PlanPhase,
    describe,
)
from phalanx.core.plan_tree import (
    EMPTY_PLAN,
    TAG_LABEL_PREFIX,
    NodeKind,
    PlanError,
    PlanNode,
    dump_plan,
    edges,
    leaves,
    parse_plan,
    plan_json,
)

__all__ = [
    "EMPTY_PLAN",
    "PARALLEL",
    "SEQUENTIAL",
    "TAG_LABEL_PREFIX",
    "TRIAL",
    "DataTransfer",
    "NodeKind",
    "PlanError",
    "PlanIntent",
    "PlanNode",
    "PlanOutcome",
    "PlanPhase",
    "TogetherRule",
    "derive_intent",
    "describe",
    "dump_plan",
    "edges",
    "hard_rule_violations",
    "leaves",
    "parse_plan",
    "plan_json",
    "tags_from_labels",
    "together_rules",
]
