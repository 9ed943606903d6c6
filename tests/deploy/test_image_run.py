"""The image, built and run: what the chart relies on, proven on the real artefact.

`scripts/image.sh build` builds the Dockerfile with buildah on a Debian bookworm base made by
mmdebstrap (`make image` runs it before the tests; here it is a cached no-op). The container
runs as the chart runs it: the image's own user, a read-only root filesystem with only /tmp
writable, every capability dropped, `phalanx serve` over a mounted cluster file, on loopback.

Without buildah/podman/mmdebstrap/runc (install them with `scripts/image-tools.sh`) these
tests are skipped, unless PHALANX_REQUIRE_E2E=1 (CI): then they fail and say why.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from deploykit import REPO

from builders import node_obj, pod_obj, podgroup_obj
from tiers import unavailable

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

IMAGE_SCRIPT = REPO / "scripts" / "image.sh"
TOOLS = ("mmdebstrap", "buildah", "podman", "runc")
BUILD_TIMEOUT_SECONDS = 840
START_TIMEOUT_SECONDS = 60
USER = "65532:65532"  # helm/phalanx: runAsUser / runAsGroup
# A regression guard, not a goal: measured 296 MB (README, "Install"); the kubernetes client
# and its bytecode are 128 MB of it.
SIZE_BUDGET_BYTES = 320 * 1000 * 1000
CLUSTER_IN_CONTAINER = "/etc/phalanx/cluster.json"

# Two free 8-GPU nodes, one half-used, one CPU node, and a pending gang of two 8-GPU pods:
# the gang fits whole only on gpu-a + gpu-c.
CLUSTER = [
    node_obj("gpu-a"),
    node_obj("gpu-b"),
    node_obj("gpu-c"),
    node_obj("cpu-1", 0, cpu="16", memory="64Gi"),
    pod_obj("busy", 4, namespace="team-a", node="gpu-b", phase="Running"),
    podgroup_obj("pair", 2, namespace="team-a"),
    pod_obj("pair-0", 8, namespace="team-a", group="pair"),
    pod_obj("pair-1", 8, namespace="team-a", group="pair"),
]
OFFERED = ["gpu-a", "gpu-b", "gpu-c", "cpu-1"]


def image_script(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(IMAGE_SCRIPT), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )


def podman(*args: str) -> subprocess.CompletedProcess[str]:
    """podman on the project's image store (scripts/image.sh podman)."""
    return image_script("podman", *args)


def ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, f"{proc.args} exited {proc.returncode}:\n{proc.stderr}"
    return proc.stdout.strip()


def package_version() -> str:
    return str(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def as_sent(obj: dict[str, Any]) -> dict[str, Any]:
    """A pod as kube-scheduler sends it: informer objects carry no kind/apiVersion."""
    return {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}


def filter_args(pod_name: str) -> dict[str, Any]:
    """An ExtenderArgs body in NodeNames mode (nodeCacheCapable: true, as the chart sets)."""
    (pod,) = [o for o in CLUSTER if o["kind"] == "Pod" and o["metadata"]["name"] == pod_name]
    return {"Pod": as_sent(pod), "Nodes": None, "NodeNames": OFFERED}


@pytest.fixture(scope="module")
def image() -> str:
    """The built image's name; a build failure fails the test with the build's own error."""
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        why = f"{', '.join(missing)} not installed: run scripts/image-tools.sh (as root)"
        unavailable(why)
    proc = image_script("build", timeout=BUILD_TIMEOUT_SECONDS)
    if proc.returncode != 0:
        pytest.fail(
            f"scripts/image.sh build exited {proc.returncode}:\n{proc.stderr[-4000:]}",
            pytrace=False,
        )
    return proc.stdout.strip().splitlines()[-1]


@dataclass(frozen=True)
class Served:
    container: str
    url: str


@pytest.fixture(scope="module")
def served(image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """`phalanx serve --cluster-file` in the image, as locked down as the chart runs it."""
    cluster = tmp_path_factory.mktemp("image") / "cluster.json"
    cluster.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": CLUSTER}))
    cluster.chmod(0o644)  # the container's user is not the file's owner
    port = free_port()
    name = f"phalanx-image-test-{os.getpid()}"
    ok(
        podman(
            "run", "--detach", "--name", name,
            "--read-only", "--read-only-tmpfs=false", "--tmpfs", "/tmp",
            "--cap-drop=ALL", "--security-opt=no-new-privileges",
            "--network=host", "--health-interval=disable",
            "--env", f"PHALANX_PORT={port}",
            "--volume", f"{cluster}:{CLUSTER_IN_CONTAINER}:ro",
            image, "--cluster-file", CLUSTER_IN_CONTAINER,
        )
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_serving(name, url)
        yield Served(name, url)
    finally:
        podman("rm", "--force", "--time=5", name)


def wait_until_serving(container: str, url: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        state = ok(podman("inspect", "--format", "{{.State.Status}}", container))
        if state != "running":
            break
        time.sleep(0.5)
    logs = podman("logs", container)
    pytest.fail(f"{container} is not serving {url}:\n{logs.stdout}{logs.stderr}", pytrace=False)


def run_in(served: Served, code: str) -> subprocess.CompletedProcess[str]:
    return podman("exec", served.container, "python", "-c", code)


# ---- the artefact -------------------------------------------------------------------------


def test_phalanx_version_in_the_image_is_the_package_version(image: str) -> None:
    out = ok(podman("run", "--rm", "--read-only", "--entrypoint", "phalanx", image, "--version"))
    assert out == f"phalanx {package_version()}"


def test_the_image_declares_the_chart_user_and_phalanx_serve(image: str) -> None:
    (inspected,) = json.loads(ok(podman("image", "inspect", image)))
    assert inspected["Config"]["User"] == USER
    assert inspected["Config"]["Entrypoint"] == ["phalanx", "serve"]
    # Kept because the image is built in docker format (OCI's config has no health check).
    assert "/healthz" in " ".join(inspected["Healthcheck"]["Test"])


def test_the_venv_runs_on_the_debian_base_python(image: str) -> None:
    # The build argument took effect: Debian's python3.11 lives in /usr/bin, the public image's
    # in /usr/local/bin.
    target = ok(
        podman("run", "--rm", "--entrypoint", "readlink", image, "/opt/phalanx/bin/python3")
    )
    assert target == "/usr/bin/python3"


def test_the_shipped_venv_has_no_installer(image: str) -> None:
    # Nothing is installed at run time; pip and setuptools are removed after the build.
    code = "import importlib.util as u; print([m for m in ('pip', 'setuptools') if u.find_spec(m)])"
    assert ok(podman("run", "--rm", "--entrypoint", "python", image, "-c", code)) == "[]"


def test_the_image_stays_within_its_size_budget(image: str) -> None:
    size = int(ok(podman("image", "inspect", "--format", "{{.Size}}", image)))
    assert size <= SIZE_BUDGET_BYTES, f"{image} is {size / 1e6:.0f} MB"


# ---- running as the chart runs it ---------------------------------------------------------


def test_the_server_runs_as_the_non_root_user(served: Served) -> None:
    ids = ok(run_in(served, "import os; print(f'{os.getuid()}:{os.getgid()}')"))
    assert ids == USER
    # PID 1 is `phalanx serve` itself, under that user.
    status = ok(podman("exec", served.container, "cat", "/proc/1/status"))
    uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
    assert uid_line.split()[1:] == ["65532"] * 4


@pytest.mark.parametrize(
    "path",
    ["/opt/phalanx/written", "/etc/written", "/written", "/var/tmp/written"],
    ids=["venv", "etc", "root", "var-tmp"],  # var-tmp: podman's default tmpfs there is off
)
def test_the_root_filesystem_is_read_only(served: Served, path: str) -> None:
    code = (
        "import errno, sys\n"
        f"try: open({path!r}, 'w')\n"
        "except OSError as e: print(errno.errorcode[e.errno]); sys.exit(0)\n"
        "print('written')"
    )
    assert ok(run_in(served, code)) == "EROFS"


def test_only_the_mounted_tmp_is_writable(served: Served) -> None:
    code = "open('/tmp/written', 'w').write('x'); print('ok')"
    assert ok(run_in(served, code)) == "ok"


@pytest.mark.parametrize(
    ("path", "body"),
    [("/healthz", {"status": "ok"}), ("/readyz", {"status": "ready"})],
    ids=["healthz", "readyz"],
)
def test_the_probes_answer_over_loopback(served: Served, path: str, body: dict[str, str]) -> None:
    response = httpx.get(served.url + path, timeout=10)

    assert response.status_code == 200
    assert response.json() == body


def test_the_dockerfile_healthcheck_passes_on_this_base(served: Served) -> None:
    proc = podman("healthcheck", "run", served.container)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_filter_places_the_gang_whole_on_the_nodes_that_fit_it(served: Served) -> None:
    kept = {}
    for member in ("pair-0", "pair-1"):
        response = httpx.post(f"{served.url}/filter", json=filter_args(member), timeout=10)
        assert response.status_code == 200
        answer = response.json()
        assert answer["Error"] == ""
        (kept[member],) = answer["NodeNames"]  # each member is pinned to its planned node
        # kube-scheduler reads other nodes' reasons only when no node is kept
        assert answer["FailedNodes"] == answer["FailedAndUnresolvableNodes"] == {}

    assert sorted(kept.values()) == ["gpu-a", "gpu-c"]  # never the half-used gpu-b
