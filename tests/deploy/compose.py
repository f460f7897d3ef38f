"""The deploy test's handle on a real Docker engine: compose.yaml with the host-network
override, driven through the `docker-compose` and `docker` commands a user types.

Nothing here fakes Docker: every call is a subprocess to the engine on this host.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pos_lambda.settings import PROJECT_ROOT

COMPOSE_FILES = (
    PROJECT_ROOT / "compose.yaml",
    PROJECT_ROOT / "infra/docker/compose.host-network.yaml",
)
IMAGE_REPOSITORY = "pos-lambda"


class DockerError(RuntimeError):
    pass


def docker(*args: str, timeout: float = 120, check: bool = True) -> str:
    proc = subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and proc.returncode != 0:
        raise DockerError(
            f"docker {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()}"
        )
    return proc.stdout


def engine_answers() -> bool:
    try:
        docker("version", "--format", "{{.Server.Version}}", timeout=20)
        return True
    except (DockerError, FileNotFoundError, subprocess.TimeoutExpired):
        return False


def compose_command() -> list[str]:
    """`docker compose` (v2 plugin) where the client has it, else `docker-compose` (v1)."""
    if (
        subprocess.run(
            ["docker", "compose", "version"], capture_output=True, check=False
        ).returncode
        == 0
    ):
        return ["docker", "compose"]
    found = shutil.which("docker-compose")
    if found is None:
        raise DockerError("neither `docker compose` nor `docker-compose` is installed")
    return [found]


def without_host_ports(config: dict[str, Any]) -> dict[str, Any]:
    """compose.yaml's services with the host-network override merged, minus `ports` where
    a service shares the host's network: there a container's ports are the host's
    already, and Compose v1 refuses the pair outright ("host network_mode is incompatible
    with port_bindings"; v2 and `docker run` only warn). An override cannot remove a
    list entry in v1, so the merged file is rendered once and this one key dropped."""
    services = {
        name: {
            k: v for k, v in svc.items() if not (k == "ports" and svc.get("network_mode") == "host")
        }
        for name, svc in config.get("services", {}).items()
    }
    return {**config, "services": services}


def image_size_bytes(tag: str) -> int:
    return int(docker("image", "inspect", "--format", "{{.Size}}", f"{IMAGE_REPOSITORY}:{tag}"))


@dataclass(frozen=True)
class ServiceState:
    """One container of a service, as `docker inspect` reports it."""

    status: str  # created, running, exited, ...
    exit_code: int
    health: str | None  # healthy, unhealthy, starting; None without a health check
    started_at: str
    restarts: int


@dataclass
class Compose:
    """One compose project: its files, its env file, its name."""

    project: str
    env_file: Path
    log_dir: Path

    def __post_init__(self) -> None:
        command = [
            *compose_command(),
            "--project-name", self.project,
            "--project-directory", str(PROJECT_ROOT),
            "--env-file", str(self.env_file),
        ]  # fmt: skip
        merged = subprocess.run(
            [*command, *(a for f in COMPOSE_FILES for a in ("-f", str(f))), "config"],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        if merged.returncode != 0:
            raise DockerError(f"compose config refused the files:\n{merged.stderr}")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.rendered = self.log_dir / "compose.rendered.yaml"
        self.rendered.write_text(yaml.safe_dump(without_host_ports(yaml.safe_load(merged.stdout))))
        self.base = [*command, "-f", str(self.rendered)]

    def run(
        self, *args: str, timeout: float = 600, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """A compose command, its output appended to compose.log for the post-mortem."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(
            [*self.base, *args], capture_output=True, text=True, timeout=timeout, check=False
        )
        with open(self.log_dir / "compose.log", "a") as log:
            log.write(f"$ {' '.join(args)} -> {proc.returncode}\n{proc.stdout}{proc.stderr}\n")
        if check and proc.returncode != 0:
            raise DockerError(
                f"compose {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
            )
        return proc

    def container(self, service: str) -> str | None:
        ids = self.run("ps", "-a", "-q", service).stdout.split()
        return ids[0] if ids else None

    def state(self, service: str) -> ServiceState | None:
        cid = self.container(service)
        if cid is None:
            return None
        info = json.loads(docker("inspect", cid))[0]
        st = info["State"]
        return ServiceState(
            status=st["Status"],
            exit_code=int(st["ExitCode"]),
            health=(st.get("Health") or {}).get("Status"),
            started_at=st["StartedAt"],
            restarts=int(info.get("RestartCount", 0)),
        )

    def volume_dir(self, volume: str) -> Path:
        """Where a named volume of this project lives on this host (root reads it)."""
        name = f"{self.project}_{volume}"
        return Path(docker("volume", "inspect", "--format", "{{.Mountpoint}}", name).strip())

    def save_logs(self, services: Sequence[str]) -> None:
        for service in services:
            out = self.run("logs", "--no-color", service, check=False, timeout=120)
            (self.log_dir / f"{service}.log").write_text(out.stdout + out.stderr)

    def down(self) -> None:
        """Stop and remove the project's containers, networks and volumes; the speed
        layer is given its stop grace period (compose.yaml: 90 s)."""
        self.run(
            "--profile",
            "full",
            "--profile",
            "tools",
            "down",
            "--volumes",
            "--remove-orphans",
            "--timeout",
            "90",
            timeout=900,
        )

    def leftovers(self) -> list[str]:
        """Containers and volumes of this project still on the engine."""
        label = f"label=com.docker.compose.project={self.project}"
        containers = docker("ps", "-a", "-q", "--filter", label).split()
        volumes = docker("volume", "ls", "-q", "--filter", label).split()
        return [f"container {c}" for c in containers] + [f"volume {v}" for v in volumes]


def await_state(compose: Compose, service: str, done: str, timeout: float) -> float:
    """Await a service's container reaching `done`: `healthy` (health check passing),
    `running`, or `exited 0` (a one-shot). Returns the seconds it took; a one-shot that
    exits non-zero or a container that stops fails at once, with its log."""
    t0 = time.monotonic()
    while True:
        st = compose.state(service)
        if st is not None:
            if done == "healthy" and st.health == "healthy":
                break
            if done == "running" and st.status == "running":
                break
            if done == "exited 0" and st.status == "exited":
                if st.exit_code == 0:
                    break
                raise DockerError(
                    f"{service} exited {st.exit_code}:\n{_tail_logs(compose, service)}"
                )
            if done != "exited 0" and st.status in ("exited", "dead"):
                raise DockerError(
                    f"{service} stopped (exit {st.exit_code}) instead of turning {done}:\n"
                    f"{_tail_logs(compose, service)}"
                )
            if st.health == "unhealthy":
                raise DockerError(f"{service} turned unhealthy:\n{_tail_logs(compose, service)}")
        if time.monotonic() - t0 > timeout:
            logs = _tail_logs(compose, service)
            raise DockerError(f"{service} not {done} after {timeout:.0f} s (state {st}):\n{logs}")
        time.sleep(1.0)  # polling the engine: the condition is the container's state
    return time.monotonic() - t0


def _tail_logs(compose: Compose, service: str) -> str:
    out = compose.run("logs", "--no-color", "--tail", "40", service, check=False, timeout=60)
    return out.stdout + out.stderr
