"""Process settings: `PHALANX_*` environment variables, overridden by `phalanx serve` flags.

Every field is also a flag of `phalanx serve` (`--cluster-file`, `--barrier-timeout-seconds`,
...; `scheduler_names` is the repeatable `--scheduler-name`). Flags win over the
environment, the environment over the defaults. Validation runs once, at start, and
names the flag and the variable at fault.

Outside the adapter layers (the CLI builds it and hands plain values down); the core never
imports it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from phalanx.core.inventory import parse_placement
from phalanx.core.model import Placement
from phalanx.core.topology import Topologies, parse_topologies
from phalanx.service.extender import ServiceSettings

ENV_PREFIX = "PHALANX_"
MIB = 1 << 20

LogLevel = Literal["debug", "info", "warning", "error", "critical"]


class Settings(BaseSettings):
    """What one Phalanx process needs; see the module docstring for precedence."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        extra="forbid",
        frozen=True,
        validate_default=True,
    )

    # ---- cluster source (at most one here; `phalanx serve` requires exactly one) ----------
    cluster_file: Path | None = Field(
        default=None,
        description="A Kubernetes List (JSON or YAML, e.g. `kubectl get nodes,pods,podgroups "
        "-A -o yaml`) to serve from memory; bindings update it in memory only.",
    )
    kubeconfig: Path | None = Field(
        default=None, description="Talk to the cluster this kubeconfig points at."
    )
    in_cluster: bool = Field(
        default=False,
        description="Talk to the cluster Phalanx runs in (service account token).",
    )

    # ---- listeners -------------------------------------------------------------------------
    host: str = Field(
        default="127.0.0.1",
        description="Extender listen address. Loopback by default: Phalanx runs as a sidecar "
        "of kube-scheduler, and nothing else should reach /bind.",
    )
    port: int = Field(
        default=8888,
        ge=0,
        le=65535,
        description="Extender listen port (0 picks a free one). 8888 is what the reference "
        "KubeSchedulerConfiguration's urlPrefix names.",
    )
    metrics_host: str | None = Field(
        default=None,
        description="Separate listen address for /metrics, so Prometheus can scrape it while "
        "the extender stays on loopback. Defaults to `host` when only --metrics-port is given.",
    )
    metrics_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="Port of the separate metrics listener; unset serves /metrics on the "
        "extender port only.",
    )
    tls_cert_file: Path | None = Field(
        default=None,
        description="PEM certificate for the extender listener (with --tls-key-file); the "
        "extender config's urlPrefix must then be https.",
    )
    tls_key_file: Path | None = Field(
        default=None, description="PEM private key matching --tls-cert-file."
    )

    # ---- scheduling ------------------------------------------------------------------------
    scheduler_names: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["phalanx"],
        description="schedulerName(s) of the kube-scheduler profiles this Phalanx serves; "
        "pods naming another scheduler are never touched. Env: comma-separated.",
    )
    scheduler_config: Path | None = Field(
        default=None,
        description="The KubeSchedulerConfiguration kube-scheduler runs with (the chart "
        "mounts it). Read at start to check that the profiles Phalanx serves disable "
        "kube-scheduler's own GangScheduling: two gang logics on one pod is a bug.",
    )
    default_placement: str = Field(
        default="pack",
        description="Placement policy of a gang that declares none: pack, same-node, spread, "
        "interconnect-local or domain:<node-label-key>. `pack` leaves whole nodes free for "
        "the next big gang.",
    )
    topologies: str = Field(
        default="",
        description="Node topologies gangs may ask to be placed in (docs/topology.md): "
        "entries `name=key,key,...`, node label keys from the widest level to the narrowest, "
        "separated by `;` or new lines; the first is the default. Empty: spine > leaf > "
        "NVLink clique > host (network.topology.nvidia.com/spine, "
        "network.topology.nvidia.com/leaf, nvidia.com/gpu.clique, kubernetes.io/hostname).",
    )
    reservation_ttl_seconds: int = Field(
        default=60,
        gt=0,
        description="Seconds a gang's reservation is held when the gang sets no timeout of "
        "its own (a PodGroup's scheduleTimeoutSeconds, phalanx.io/schedule-timeout-seconds, "
        "YuniKorn's placeholderTimeoutInSeconds). kube-scheduler never tells an extender it "
        "gave up, so an unbound reservation must expire; 60 s is scheduler-plugins' default.",
    )
    barrier_timeout_seconds: float = Field(
        default=20.0,
        allow_inf_nan=False,
        description="Seconds /bind holds a member waiting for the rest of its gang, and "
        "seconds a gang may go with no new member reaching /bind before its reservation is "
        "given up (while members keep arriving, a bind held this long is answered and its "
        "member stays counted, bound with the gang). With the 8 s a member's binding may "
        "then take, must stay below the extender httpTimeout (the chart sets 30 s), or "
        "kube-scheduler abandons the request first; and below the reservation TTL.",
    )
    template_reservation: bool = Field(
        default=True,
        description="Reserve a gang whose members share one shape from its first member, "
        "before every member exists (members claim slots as they arrive; nothing binds "
        "before the quorum reaches /bind). false: every gang waits for minMember members "
        "first, and each waiting member pays kube-scheduler's backoff.",
    )
    single_pod_nodes: int = Field(
        default=1,
        ge=0,
        description="For a pod in no gang, filter answers at most this many best-fit nodes. "
        "1 (the default): kube-scheduler has one node left and skips the prioritize call, "
        "one extender round trip a pod instead of two; its own soft scoring (spreading, "
        "affinity preferences) then no longer picks among nodes. 0: every feasible node, "
        "ranked by prioritize and kube-scheduler's scores together.",
    )
    nominate_members: bool = Field(
        default=True,
        description="Nominate a reserved gang's pending members to their reserved node "
        "(status.nominatedNodeName): each member's kube-scheduler cycle then filters that "
        "one node. false: members are only requeued, and each cycle filters every node "
        "again. Turn it off where a long queue of other pods pays for the nominations (every "
        "other pod's cycle filters a node holding nominations twice); Phalanx already skips "
        "them behind a backlog of more than nodes/4 pending pods, and for a member that "
        "claims a slot on arrival and is bound with its gang anyway (complete_members).",
    )
    complete_members: bool = Field(
        default=True,
        description="Once a reserved gang's first member reaches /bind, bind its other "
        "reserved members with it, without waiting for kube-scheduler's cycle of each. Only "
        "members that ask for nothing only kube-scheduler judges are bound this way (no "
        "scheduling gates, host ports, required inter-pod affinity, required topology "
        "spreading, storage volumes or ResourceClaims, nor an extended resource a "
        "DeviceClass serves on a node without it allocatable); the others wait for their "
        "own /bind. "
        "A gang of such members is also planned as its quorum appears, and behind other "
        "pending pods bound whole before any member's cycle. "
        "false: every member waits for its own /bind, as kube-scheduler's filters see each.",
    )
    report_hold_seconds: float = Field(
        default=5.0,
        ge=0,
        allow_inf_nan=False,
        description="Seconds a gang's status or Event may wait while Phalanx has bindings in "
        "flight. On a busy API server every write delays the others, its watch events too; "
        "status and Events only say what already happened, so they go once the bindings "
        "have been quiet for 0.5 s, or after this long, and a gang's status is written once "
        "with its latest content. Nominations, requeues and a PodGroup's first status never "
        "wait. 0: written at once.",
    )
    dra_extended_resources: bool = Field(
        default=True,
        description="Whether kube-scheduler serves extended resources (nvidia.com/gpu, "
        "deviceclass.resource.kubernetes.io/<class>) from DRA devices where a DeviceClass "
        "maps them (its DRAExtendedResource feature gate, on by default from Kubernetes "
        "1.36). Phalanx cannot read kube-scheduler's gates, so say it here: true plans such "
        "pods on DRA-only nodes too; false, as kube-scheduler without the gate does, only "
        "on nodes with the resource allocatable (device plugins). The chart sets it from "
        "its kube-scheduler's version and feature gates.",
    )
    api_qps: float = Field(
        default=250.0,
        gt=0,
        allow_inf_nan=False,  # "inf" read as no limit only by accident of the bucket's arithmetic
        description="Sustained writes per second to the API server (bindings, commit records, "
        "Events, status), client-go's QPS. 250 binds a 256-member gang in about a second "
        "while leaving the API server room; raise it with the server's own limits.",
    )
    api_burst: int = Field(
        default=500,
        gt=0,
        description="Writes admitted at once after a quiet spell (client-go's Burst): a large "
        "gang's bindings, its commit record and its Events go out together.",
    )
    max_body_bytes: int = Field(
        default=64 * MIB,
        gt=0,
        description="Largest request body accepted (bytes). 64 MiB admits a 5,000-node "
        "NodeList sent by a kube-scheduler with nodeCacheCapable: false (real Node objects, "
        "image lists included, run to ~10 KiB each).",
    )
    log_level: LogLevel = Field(
        default="info",
        description="Log threshold of the JSON logs. debug adds an access line per HTTP "
        "request (two per pod kube-scheduler places); /metrics counts every request.",
    )

    # ---- validation ------------------------------------------------------------------------

    @field_validator("scheduler_names", mode="before")
    @classmethod
    def _split_names(cls, value: object) -> object:
        if isinstance(value, str):
            value = value.split(",")
        if isinstance(value, list | tuple):
            return [str(v).strip() for v in value if str(v).strip()]
        return value

    @field_validator("scheduler_names")
    @classmethod
    def _some_names(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("name at least one scheduler profile to serve")
        return list(dict.fromkeys(value))

    @field_validator("default_placement")
    @classmethod
    def _placement(cls, value: str) -> str:
        parse_placement(value)  # raises ValueError naming the problem
        return value

    @field_validator("topologies")
    @classmethod
    def _topologies(cls, value: str) -> str:
        parse_topologies(value)  # raises TopologyConfigError (a ValueError) naming the entry
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value

    @field_validator("barrier_timeout_seconds")
    @classmethod
    def _positive_barrier(cls, value: float) -> float:
        if not value > 0:
            raise ValueError("must be > 0 (seconds /bind waits for the rest of the gang)")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        chosen = self.cluster_sources()
        if len(chosen) > 1:
            raise ValueError("choose one cluster source, not " + " and ".join(chosen))
        for name in ("cluster_file", "tls_cert_file", "tls_key_file"):
            path: Path | None = getattr(self, name)
            if path is not None and not path.is_file():
                raise ValueError(f"{flag(name)}: {path} is not a readable file")
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("TLS needs both --tls-cert-file and --tls-key-file")
        if self.metrics_host is not None and self.metrics_port is None:
            raise ValueError("--metrics-host needs --metrics-port")
        if (
            self.metrics_port is not None
            and self.metrics_port != 0
            and self.metrics_port == self.port
            and (self.metrics_host or self.host) == self.host
        ):
            raise ValueError(
                f"--metrics-port {self.metrics_port} is the extender's own address; "
                "omit it to serve /metrics there, or pick another port"
            )
        if self.barrier_timeout_seconds >= self.reservation_ttl_seconds:
            raise ValueError(
                f"--barrier-timeout-seconds ({self.barrier_timeout_seconds:g}) must be below "
                f"--reservation-ttl-seconds ({self.reservation_ttl_seconds}): a reservation "
                "must outlive the bind barrier that waits on it"
            )
        return self

    # ---- derived values --------------------------------------------------------------------

    def cluster_sources(self) -> list[str]:
        """The cluster sources chosen, as their flags."""
        chosen = []
        if self.cluster_file is not None:
            chosen.append("--cluster-file")
        if self.kubeconfig is not None:
            chosen.append("--kubeconfig")
        if self.in_cluster:
            chosen.append("--in-cluster")
        return chosen

    @property
    def placement(self) -> Placement:
        return parse_placement(self.default_placement)

    @property
    def topology_config(self) -> Topologies:
        return parse_topologies(self.topologies)

    @property
    def metrics_address(self) -> tuple[str, int] | None:
        """Where the separate metrics listener binds, or None for none."""
        if self.metrics_port is None:
            return None
        return (self.metrics_host or self.host, self.metrics_port)

    def service_settings(self) -> ServiceSettings:
        return ServiceSettings(
            default_placement=self.placement,
            topologies=self.topology_config,
            default_timeout_seconds=self.reservation_ttl_seconds,
            barrier_timeout_seconds=self.barrier_timeout_seconds,
            template_reservation=self.template_reservation,
            single_pod_nodes=self.single_pod_nodes,
            nominate_members=self.nominate_members,
            complete_members=self.complete_members,
            report_hold_seconds=self.report_hold_seconds,
        )


def flag(field: str) -> str:
    """The `phalanx serve` flag of a settings field."""
    if field == "scheduler_names":
        return "--scheduler-name"
    return "--" + field.replace("_", "-")


def env_var(field: str) -> str:
    return ENV_PREFIX + field.upper()


def describe_error(exc: ValidationError) -> str:
    """One line per problem, naming the flag and the environment variable at fault."""
    lines = ["invalid settings:"]
    for err in exc.errors():
        loc = [str(part) for part in err["loc"]]
        msg = str(err["msg"]).removeprefix("Value error, ")
        if loc and loc[0] in Settings.model_fields:
            where = f"{flag(loc[0])} / {env_var(loc[0])}"
            lines.append(f"  {where}: {msg}")
        elif err["type"] == "extra_forbidden" and loc:
            lines.append(f"  unknown setting {loc[0]!r}")
        else:
            lines.append(f"  {msg}")
    return "\n".join(lines)
