"""The live source's DRA feed: `resource.k8s.io` objects into the cluster model.

Four informers (ResourceSlices and DeviceClasses, cluster-scoped; ResourceClaims and
ResourceClaimTemplates, every namespace) feed a `phalanx.core.dra_model.DraModel`, which
also bridges the nodes and pods the rest of `phalanx.sources.kube` hands it. A fifth
follows DeviceTaintRules (cluster-scoped) where the API server serves them. Each batch an
informer delivers is applied and settled in one loop step (`DraModel.settle`).

Discovery, on a thread of its own::

    start ─▶ GET /apis/resource.k8s.io/v1 ── served ──▶ the four informers run
                   │ not served (404, or a kind missing) ─▶ DRA off: synced, looked for
                   │                                         again every `recheck_seconds`
                   └ error ─▶ backoff, ask again

DeviceTaintRules, on another (older servers lack them, so they are discovered apart)::

    start ─▶ GET /apis/resource.k8s.io/v1, v1beta2, v1alpha3 ── the first serving
                   │                     devicetaintrules ──▶ its informer runs in that version
                   │ served in none ─▶ no rules (nothing else changes), looked for
                   │                       again every `recheck_seconds`
                   └ error ─▶ backoff, ask again
    the informer finds the kind gone (404) ─▶ every rule forgotten, discover again

* **Synced** once discovery has answered and, when served, every kind (DeviceTaintRules
  too, where served) has been listed; it stays synced (an API served later is followed
  without turning the service unready).
* **Bad input.** An object the decoder refuses is treated as absent: one log line and one
  Event, until it is valid again. A pod's demand problems (an unknown class, a selector
  that does not parse, a missing claim) make it unplaceable: one Event per pod and problem.
  Where Phalanx plans a request by count only (a selector it cannot evaluate), that is said
  once per pod and note, as a Normal Event. Pools not used (a device listed twice,
  devices reachable from several nodes) and class selectors not evaluated are said once
  each while they last (an incomplete pool, a driver mid-update, is only logged).
* **Unblocked pods are requeued.** A pod refused because Phalanx had not seen its claim yet
  waits in kube-scheduler's unschedulable queue: once its demand is whole it is touched, so
  kube-scheduler tries it again now rather than at its next flush.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import Any, Protocol

from phalanx.core.cache import ClusterState
from phalanx.core.dra import (
    DeviceClass,
    DeviceTaintRule,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
    parse_device_class,
    parse_device_taint_rule,
    parse_resource_claim,
    parse_resource_claim_template,
    parse_resource_slice,
)
from phalanx.core.dra_model import DraModel
from phalanx.core.dra_state import Finding
from phalanx.core.model import Node, Pod, PodGroup, PodRef
from phalanx.sources.base import StateUpdate
from phalanx.sources.informer import (
    ApiError,
    Delete,
    Ending,
    Handler,
    Informer,
    InformerSettings,
    Invalid,
    Kind,
    Transport,
    Upsert,
)
from phalanx.sources.notices import Notices
from phalanx.sources.retry import answered

log = logging.getLogger(__name__)


DRA_GROUP_VERSION = "resource.k8s.io/v1"
DRA_API = f"/apis/{DRA_GROUP_VERSION}"

RESOURCE_SLICES: Kind[ResourceSlice] = Kind(
    "ResourceSlice", f"{DRA_API}/resourceslices", parse_resource_slice
)
DEVICE_CLASSES: Kind[DeviceClass] = Kind(
    "DeviceClass", f"{DRA_API}/deviceclasses", parse_device_class
)
RESOURCE_CLAIMS: Kind[ResourceClaim] = Kind(
    "ResourceClaim", f"{DRA_API}/resourceclaims", parse_resource_claim
)
RESOURCE_CLAIM_TEMPLATES: Kind[ResourceClaimTemplate] = Kind(
    "ResourceClaimTemplate", f"{DRA_API}/resourceclaimtemplates", parse_resource_claim_template
)
# The collection name of each kind in the API group's discovery document.
RESOURCES = {
    "ResourceSlice": "resourceslices",
    "DeviceClass": "deviceclasses",
    "ResourceClaim": "resourceclaims",
    "ResourceClaimTemplate": "resourceclaimtemplates",
}
DRA_KINDS = tuple(RESOURCES)

DEVICE_TAINT_RULE = "DeviceTaintRule"
DEVICE_TAINT_RULES = "devicetaintrules"
# Where DeviceTaintRules may be served, newest first: GA in 1.37; 1.36 serves v1beta2, an
# API version off by default; 1.33-1.35 only the alpha v1alpha3, which kube-scheduler 1.35
# reads with its DRADeviceTaints and DRADeviceTaintRules gates on.
RULE_VERSIONS = ("resource.k8s.io/v1", "resource.k8s.io/v1beta2", "resource.k8s.io/v1alpha3")
# Every kind the feed follows (Events name them; their UIDs are the feed's).
ALL_DRA_KINDS = (*DRA_KINDS, DEVICE_TAINT_RULE)


def rule_kind(group_version: str) -> Kind[DeviceTaintRule]:
    """DeviceTaintRules as served in `group_version` (one parser: v1alpha3's extra selector
    fields are refused by it, see `parse_device_taint_rule`)."""
    return Kind(
        DEVICE_TAINT_RULE, f"/apis/{group_version}/{DEVICE_TAINT_RULES}", parse_device_taint_rule
    )


# Event reasons.
INVALID_OBJECT = "InvalidObject"
INVALID_DEVICE_CLAIM = "InvalidDeviceClaim"
APPROXIMATE_DEVICE_CLAIM = "DeviceClaimApproximated"
DRA_NOT_PLANNED = "DevicesNotPlanned"


class DiscoveryApi(Transport, Protocol):
    """What the feed needs of the API: list, watch, and one GET for discovery."""

    def request(self, method: str, path: str, body: Any = None) -> dict[str, Any]: ...


Post = Callable[[StateUpdate], None]
Spawn = Callable[[Coroutine[Any, Any, None]], None]


class EventSink(Protocol):
    async def emit_event(
        self,
        kind: str,
        namespace: str,
        name: str,
        reason: str,
        message: str,
        *,
        warning: bool = False,
    ) -> None: ...

    async def requeue(self, pods: Sequence[PodRef], reason: str) -> None: ...


class DraFeed:
    """The DRA informers and the model they feed (see module docstring).

    `post` hands an update to the event loop (from any thread); `spawn` runs a write in
    the background (loop only); `sink` writes Events and requeues pods. Everything but
    `run` and `stop` is called on the loop.
    """

    def __init__(
        self,
        api: DiscoveryApi,
        *,
        post: Post,
        spawn: Spawn,
        sink: EventSink,
        settings: InformerSettings | None = None,
        recheck_seconds: float = 60.0,
        on_restart: Callable[[str, str], None] | None = None,
        stop: threading.Event | None = None,
        extended_resources: bool = True,
    ) -> None:
        self.api = api
        self.model = DraModel(extended_resources=extended_resources)
        self._post = post
        self._spawn = spawn
        self._sink = sink
        self.settings = settings or InformerSettings()
        self.recheck_seconds = recheck_seconds
        self._stop = stop or threading.Event()
        restart = on_restart or (lambda kind, reason: None)
        self._on_restart = restart
        model = self.model
        self.informers: dict[str, Informer[Any]] = {
            kind.name: Informer(
                kind,
                api,
                self._handler(kind.name, upsert, remove),
                settings=self.settings,
                on_restart=restart,
                on_forbidden=self._forbidden,
            )
            for kind, upsert, remove in (
                (RESOURCE_SLICES, model.upsert_slice, model.remove_slice),
                (DEVICE_CLASSES, model.upsert_class, model.remove_class),
                (RESOURCE_CLAIMS, model.upsert_claim, model.remove_claim),
                (RESOURCE_CLAIM_TEMPLATES, model.upsert_template, model.remove_template),
            )
        }
        # DeviceTaintRules: their informer is made once discovery says where they are served.
        self.on_rules: Handler[DeviceTaintRule] = self._handler(
            DEVICE_TAINT_RULE, model.upsert_rule, model.remove_rule
        )
        self.rules: Informer[DeviceTaintRule] | None = None
        self._threads: list[threading.Thread] = []
        # Loop-side tables.
        self.served: bool | None = None  # None: discovery has not answered yet
        # The group version DeviceTaintRules are followed in; "" none, None: not asked yet.
        self.rules_version: str | None = None
        self._synced: set[str] = set()
        self.notices = Notices(log, self._spawn)  # pods by uid, DRA objects by kind and key
        self._blocked: set[str] = set()  # pod uids whose demand keeps them off every node
        self._findings: set[Finding] = set()
        self._ever_synced = False

    @property
    def synced(self) -> bool:
        """Discovery answered and, when served, every kind was listed once; it stays true
        (DRA appearing later is followed without turning the service unready)."""
        if not self._ever_synced:
            listed = all(k in self._synced for k in DRA_KINDS)
            rules = self.rules_version == "" or (
                bool(self.rules_version) and DEVICE_TAINT_RULE in self._synced
            )
            self._ever_synced = self.served is False or (self.served is True and listed and rules)
        return self._ever_synced

    def uid_of(self, kind: str, key: str) -> str:
        informer = self.rules if kind == DEVICE_TAINT_RULE else self.informers.get(kind)
        return informer.uid_of(key) if informer is not None else ""

    def api_version(self, kind: str) -> str:
        """The group version a kind the feed follows is read in (an Event's apiVersion)."""
        if kind == DEVICE_TAINT_RULE:
            return self.rules_version or RULE_VERSIONS[0]
        return DRA_GROUP_VERSION

    # ---- threads -----------------------------------------------------------------------

    def start(self) -> None:
        for target, name in ((self.run, "informer-DRA"), (self.run_rules, "informer-rules")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for informer in self.informers.values():
            informer.stop()
        if self.rules is not None:
            self.rules.stop()

    def join(self, timeout: float = 5.0) -> None:
        for thread in self._threads:
            thread.join(timeout=timeout)

    def run(self) -> None:
        """Discover the API; while it is served, run the informers (see module docstring)."""
        said_missing = False
        while not self._stop.is_set():
            answer = answered(
                self.discover, "the DRA API", stop=self._stop, backoff=self.settings.backoff
            )
            if not answer:
                return
            (served,) = answer
            self._post(functools.partial(self.mark_served, served))
            if not served:
                if not said_missing:
                    log.info(
                        f"{DRA_GROUP_VERSION} is not served: no DRA devices are planned; "
                        f"looking for it again every {self.recheck_seconds:g}s"
                    )
                    said_missing = True
                if self._stop.wait(self.recheck_seconds):
                    return
                continue
            said_missing = False
            if self._run_informers() is Ending.STOPPED:
                return
            log.warning(f"{DRA_GROUP_VERSION} went away; DRA devices are no longer planned")

    def discover(self) -> bool:
        try:
            answer = self.api.request("GET", DRA_API)
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
        names = {r.get("name") for r in answer.get("resources") or [] if isinstance(r, dict)}
        return all(resource in names for resource in RESOURCES.values())

    def run_rules(self) -> None:
        """Discover where DeviceTaintRules are served; follow them there while they are."""
        while not self._stop.is_set():
            answer = answered(
                self.discover_rules,
                "DeviceTaintRules",
                stop=self._stop,
                backoff=self.settings.backoff,
            )
            if not answer:
                return
            (version,) = answer
            self._post(functools.partial(self.mark_rules_served, version or ""))
            if version is None:
                if self._stop.wait(self.recheck_seconds):
                    return
                continue
            log.info("following DeviceTaintRules", extra={"version": version})
            # The feed's own stop event: `stop` ends it even before it starts.
            self.rules = Informer(
                rule_kind(version),
                self.api,
                self.on_rules,
                settings=self.settings,
                on_restart=self._on_restart,
                on_forbidden=self._forbidden,
                stop=self._stop,
            )
            if self.rules.run() is Ending.STOPPED:
                return
            log.warning(f"DeviceTaintRules are no longer served in {version}; their taints lifted")

    def discover_rules(self) -> str | None:
        """The newest group version serving DeviceTaintRules, or None."""
        for version in RULE_VERSIONS:
            try:
                answer = self.api.request("GET", f"/apis/{version}")
            except ApiError as exc:
                if exc.status == 404:
                    continue
                raise
            resources = answer.get("resources") or []
            if any(isinstance(r, dict) and r.get("name") == DEVICE_TAINT_RULES for r in resources):
                return version
        return None

    def _run_informers(self) -> Ending:
        """Run the four informers until stopped, or one finds its kind gone (then stop all)."""
        endings: list[Ending] = []
        done = threading.Event()

        def follow(informer: Informer[Any]) -> None:
            endings.append(informer.run())
            done.set()

        threads = [
            threading.Thread(target=follow, args=(i,), name=f"informer-{name}", daemon=True)
            for name, i in self.informers.items()
        ]
        for thread in threads:
            thread.start()
        done.wait()
        # One kind is gone (or we stop): the others would only retry their watches.
        for informer in self.informers.values():
            informer.stop()
        for thread in threads:
            thread.join()
        if self._stop.is_set():
            return Ending.STOPPED
        for informer in self.informers.values():
            informer.stop_event.clear()  # runnable again once the API is back
        return Ending.MISSING

    # ---- informer handlers (informer threads) ------------------------------------------

    def _handler(
        self, kind: str, upsert: Callable[[Any], None], remove: Callable[[str], None]
    ) -> Handler[Any]:
        def handle(changes: Sequence[Upsert[Any] | Delete | Invalid], synced: bool) -> None:
            def update(state: ClusterState) -> None:
                for change in changes:
                    if isinstance(change, Upsert):
                        upsert(change.obj)
                        self.notices.valid_again(kind, change.key)
                    elif isinstance(change, Delete):
                        remove(change.key)
                        self.notices.valid_again(kind, change.key)
                    else:  # absent, and pods naming it are told why
                        self.model.unreadable(kind, change.key, change.reason)
                        self._report_invalid(kind, change.key, change.reason)
                self._after(state, self.model.settle(state))
                if kind in (RESOURCE_SLICES.name, DEVICE_CLASSES.name):
                    self._tell_findings()
                if synced and kind not in self._synced:
                    self._synced.add(kind)
                    log.info("informer synced", extra={"kind": kind})

            self._post(update)

        return handle

    def _forbidden(self, kind: str, message: str) -> None:
        """Phalanx may not list `kind` (RBAC; informer thread). Pods whose claims it cannot
        read are refused until it may, the rest is scheduled: counted as synced, said loudly."""

        refused = (
            "devices tainted by DeviceTaintRules are planned as untainted"
            if kind == DEVICE_TAINT_RULE
            else "pods with ResourceClaims are refused"
        )

        def update(_: ClusterState) -> None:
            log.error(
                f"may not list {kind}: {refused} until Phalanx may; "
                "grant list and watch on it (the chart's RBAC does)",
                extra={"kind": kind, "reason": message},
            )
            self._synced.add(kind)

        self._post(update)

    def mark_served(self, served: bool, _: ClusterState) -> None:
        self.served = served

    def mark_rules_served(self, version: str, _: ClusterState) -> None:
        """`version`: where DeviceTaintRules are followed, "" when they are not served."""
        self.rules_version = version

    # ---- nodes, pods and PodGroups (called by the source's own handlers, on the loop) --

    def upsert_node(self, state: ClusterState, node: Node) -> None:
        self.model.upsert_node(state, node)

    def remove_node(self, state: ClusterState, name: str) -> list[str]:
        return self.model.remove_node(state, name)

    def upsert_pod(self, state: ClusterState, pod: Pod) -> None:
        self._after(state, self.model.upsert_pod(state, pod))

    def remove_pod(self, state: ClusterState, uid: str) -> None:
        self.notices.forget(uid)
        self._blocked.discard(uid)
        self._after(state, self.model.remove_pod(state, uid))

    def upsert_group(self, state: ClusterState, group: PodGroup) -> None:
        self._after(state, self.model.upsert_group(state, group))

    def set_group_error(self, state: ClusterState, key: str, reason: str) -> None:
        self._after(state, self.model.set_group_error(state, key, reason))

    def remove_group(self, state: ClusterState, key: str) -> None:
        self._after(state, self.model.remove_group(state, key))

    # ---- telling people ----------------------------------------------------------------

    def _after(self, state: ClusterState, pods: Iterable[Pod]) -> None:
        """Say what is new about the pods just derived; requeue the ones now unblocked."""
        unblocked = []
        for pod in pods:
            needs = pod.devices
            if needs is None:
                continue
            demand = needs.demand
            for problem in demand.problems:
                self._say(pod, problem, INVALID_DEVICE_CLAIM, warning=True)
            for note in demand.notes:
                self._say(pod, note, APPROXIMATE_DEVICE_CLAIM, warning=False)
            if demand.blocker:
                self._blocked.add(pod.uid)
            elif pod.uid in self._blocked:
                self._blocked.discard(pod.uid)
                if not state.is_bound(pod):
                    unblocked.append(pod.ref)
        if unblocked:
            self._spawn(self._sink.requeue(unblocked, "its ResourceClaims are known now"))

    def _say(self, pod: Pod, text: str, reason: str, *, warning: bool) -> None:
        self.notices.once(
            pod.uid,
            text,
            message="pod device claims",
            level=logging.WARNING if warning else logging.INFO,
            extra={"pod": pod.key, "reason": reason, "detail": text},
            event=functools.partial(
                self._sink.emit_event, "Pod", pod.namespace, pod.name, reason, text, warning=warning
            ),
        )

    def _report_invalid(self, kind: str, key: str, reason: str) -> None:
        namespace, _, name = key.rpartition("/")
        self.notices.invalid(
            kind,
            key,
            reason,
            message=f"invalid {kind} {key}: treated as absent",
            event=functools.partial(
                self._sink.emit_event, kind, namespace, name, INVALID_OBJECT, reason, warning=True
            ),
        )

    def _tell_findings(self) -> None:
        """Say each new finding about pools and classes once, while it lasts."""
        now = set(self.model.dra.findings())
        for finding in sorted(now - self._findings, key=lambda f: (f.kind, f.name, f.text)):
            (log.info if finding.passing else log.warning)(
                "DRA devices not planned",
                extra={"kind": finding.kind, "object": finding.name, "reason": finding.text},
            )
            if finding.passing:
                continue  # a driver publishing a new generation, slice by slice
            self._spawn(
                self._sink.emit_event(
                    finding.kind, "", finding.name, DRA_NOT_PLANNED, finding.text, warning=True
                )
            )
        self._findings = now
