"""compose.yaml and the Dockerfile, checked without a Docker engine.

A real Compose implementation (Debian's `docker-compose`, installed by `make setup`
through infra/system-deps.sh) validates and normalises the file: `config` parses,
interpolates and checks it against the Compose schema without a daemon. The checks
below then read the normalised services.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from pos_lambda.settings import PROJECT_ROOT

COMPOSE_FILE = PROJECT_ROOT / "compose.yaml"
ENV_EXAMPLE = PROJECT_ROOT / ".env.example"
DOCKERFILE = PROJECT_ROOT / "Dockerfile"
# compose.yaml on a Docker engine without bridge networks (tests/deploy, make deploy-test).
HOST_NETWORK = PROJECT_ROOT / "infra" / "docker" / "compose.host-network.yaml"
CORE = {
    "kafka",
    "cassandra",
    "prometheus",
    "cassandra-init",
    "kafka-init",
    "speed",
    "alerts",
    "alerts-sink",
    "receipts",
    "serve",
}
FULL_ONLY = {
    "spark-master",
    "spark-worker",
    "postgres",
    "airflow-init",
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
}
# Upstream images, not the pipeline's (the deploy test has stand-ins or leaves them out).
UPSTREAM = {"kafka", "cassandra", "prometheus"}
# One-off commands (`docker compose run --rm batch pos-batch run ...`), never `up`'s.
TOOLS = {"batch"}
SECRET_NAME = re.compile(r"PASSWORD|SECRET|FERNET|TOKEN|JAAS|SQL_ALCHEMY_CONN", re.IGNORECASE)


def _compose_cmd() -> list[str]:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    pytest.fail(
        "no Compose implementation: `make setup` installs Debian's docker-compose "
        "(infra/system-deps.sh docker-compose)"
    )


def _compose(
    *args: str, env_file: Path = ENV_EXAMPLE, files: tuple[Path, ...] = (COMPOSE_FILE,)
) -> subprocess.CompletedProcess[str]:
    # Only PATH and HOME: no variable of the calling shell may fill in a secret.
    env = {k: os.environ[k] for k in ("PATH", "HOME") if k in os.environ}
    return subprocess.run(
        [
            *_compose_cmd(),
            "--env-file",
            str(env_file),
            *(a for f in files for a in ("-f", str(f))),
            *args,
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=PROJECT_ROOT,
        timeout=120,
    )


@pytest.fixture(scope="module")
def normalized() -> dict[str, Any]:
    done = _compose("--profile", "full", "config")
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)


@pytest.fixture(scope="module")
def services(normalized: dict[str, Any]) -> dict[str, Any]:
    return normalized["services"]


@pytest.fixture(scope="module")
def example_values() -> dict[str, str]:
    pairs = (
        line.split("=", 1)
        for line in ENV_EXAMPLE.read_text().splitlines()
        if line and not line.startswith("#")
    )
    return {k.strip(): v.strip() for k, v in pairs}


def test_compose_validates_and_has_every_service(services: dict[str, Any]) -> None:
    assert set(services) == CORE | FULL_ONLY | TOOLS


def test_profiles_plain_up_is_the_core_pipeline(services: dict[str, Any]) -> None:
    for name, svc in services.items():
        if name in CORE:
            assert not svc.get("profiles"), name
        elif name in TOOLS:
            assert svc.get("profiles") == ["tools"], name
        else:
            assert svc.get("profiles") == ["full"], name


def test_every_service_has_a_pinned_image_or_a_build(services: dict[str, Any]) -> None:
    for name, svc in services.items():
        if "build" in svc:
            assert Path(svc["build"]["context"]).resolve() == PROJECT_ROOT, name
            assert (PROJECT_ROOT / svc["build"].get("dockerfile", "Dockerfile")).exists()
            continue
        image = svc["image"]
        repo, _, tag = image.rpartition(":")
        assert repo and tag and tag != "latest", f"{name}: image {image} is not pinned"
        assert re.match(r"v?\d+\.\d+", tag), f"{name}: {image} pins no version"


def test_host_ports_bind_loopback_only(services: dict[str, Any]) -> None:
    published = 0
    for name, svc in services.items():
        for port in svc.get("ports", []):
            text = port if isinstance(port, str) else f"{port.get('host_ip')}:{port}"
            assert text.startswith("127.0.0.1:"), f"{name}: {port} is published beyond loopback"
            published += 1
    assert published >= 4  # Kafka, Cassandra, serving, Airflow (and Spark's UI)


def test_a_health_check_where_a_service_serves(services: dict[str, Any]) -> None:
    waited_on = {
        dep
        for svc in services.values()
        for dep, cond in (svc.get("depends_on") or {}).items()
        if cond["condition"] == "service_healthy"
    }
    long_running = {n for n, s in services.items() if s.get("restart") != "no"}
    must = waited_on | {n for n, s in services.items() if s.get("ports")}
    must |= {"speed", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"}
    for name in must:
        hc = services[name].get("healthcheck")
        assert hc and hc.get("test"), f"{name} serves but has no health check"
    assert must <= long_running


def test_depends_on_waits_for_conditions(services: dict[str, Any]) -> None:
    for name, svc in services.items():
        for dep, cond in (svc.get("depends_on") or {}).items():
            assert cond["condition"] in ("service_healthy", "service_completed_successfully")
            if dep.endswith("-init"):
                assert cond["condition"] == "service_completed_successfully", (name, dep)
    for job in ("speed", "alerts", "alerts-sink", "receipts", "serve"):
        assert any(d.endswith("-init") for d in services[job]["depends_on"]), job


def test_one_shot_inits_for_schema_and_topics(services: dict[str, Any]) -> None:
    # The product's own provisioning command (pos_lambda.provision): the image has no
    # development package, so no `pos-infra`.
    assert services["cassandra-init"]["command"] == ["pos-provision", "cassandra-role"]
    assert services["kafka-init"]["command"] == ["pos-provision", "topics"]
    for init in ("cassandra-init", "kafka-init", "airflow-init"):
        assert services[init]["restart"] == "no"


def test_data_lives_in_named_volumes(normalized: dict[str, Any]) -> None:
    declared = set(normalized["volumes"])
    for name, svc in normalized["services"].items():
        for vol in svc.get("volumes", []):
            if isinstance(vol, str):  # docker-compose 1.x: "source:target[:mode]"
                source, target, *mode = vol.split(":")
                kind = "bind" if source.startswith(("/", ".")) else "volume"
                vol = {"type": kind, "source": source, "target": target}
                vol["read_only"] = mode == ["ro"]
            if vol["type"] == "volume":
                assert vol["source"] in declared, (name, vol)
            else:  # only the start scripts and Prometheus' config, read-only
                assert vol["type"] == "bind" and vol.get("read_only"), (name, vol)
                source = Path(vol["source"]).resolve()
                assert source.parent == PROJECT_ROOT / "infra" / "compose" or source == (
                    PROJECT_ROOT / "infra" / "prometheus"
                ), (name, vol)
    assert {"pos-data", "kafka-data", "cassandra-data", "postgres-data"} <= declared
    assert "prometheus-data" in declared


def test_no_secret_is_inline() -> None:
    """In the file itself, every secret-looking value is an interpolation from .env."""
    raw = yaml.safe_load(COMPOSE_FILE.read_text())
    offenders = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if isinstance(v, str) and SECRET_NAME.search(str(k)):
                    secret_part = v.split("://", 1)[-1]
                    if v.strip().endswith("ScramLoginModule required;") or k.endswith("_FILE"):
                        continue  # the broker's login module and a file path: no credential
                    if not re.search(r"\$\{[A-Z_]+(:\?[^}]*)?\}", secret_part):
                        offenders.append(f"{path}.{k}")
                walk(v, f"{path}.{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{path}[{i}]")

    walk(raw, "")
    assert not offenders, f"inline secrets: {offenders}"


def test_secrets_come_from_the_env_file(
    services: dict[str, Any], example_values: dict[str, str]
) -> None:
    env = services["speed"]["environment"]
    assert env["POS_KAFKA_SASL_PASSWORD"] == example_values["KAFKA_PIPELINE_PASSWORD"]
    assert env["POS_CASSANDRA_PASSWORD"] == example_values["CASSANDRA_PIPELINE_PASSWORD"]
    sched = services["airflow-scheduler"]["environment"]
    assert sched["AIRFLOW__CORE__FERNET_KEY"] == example_values["AIRFLOW_FERNET_KEY"]


def test_compose_refuses_to_start_without_the_secrets(tmp_path: Path) -> None:
    empty = tmp_path / "empty.env"
    empty.write_text("")
    done = _compose("config", env_file=empty)
    assert done.returncode != 0
    assert "in .env (see .env.example)" in done.stderr


def test_pipeline_clients_are_secured_and_serving_may_bind_the_network(
    services: dict[str, Any],
) -> None:
    from pos_lambda.settings import Settings

    for name in (
        "speed", "alerts", "alerts-sink", "receipts", "serve", "kafka-init", "airflow-scheduler",
    ):  # fmt: skip
        env = services[name]["environment"]
        assert env["POS_KAFKA_SECURITY_PROTOCOL"] == "SASL_PLAINTEXT", name
        assert env["POS_CASSANDRA_USERNAME"], name
    # The serving container binds 0.0.0.0 (published on the host's 127.0.0.1 only):
    # the settings it gets must pass the non-loopback check.
    serve_env = {k: str(v) for k, v in services["serve"]["environment"].items()}
    fields = {
        k.removeprefix("POS_").lower(): v for k, v in serve_env.items() if k.startswith("POS_")
    }
    assert Settings(**fields).bind_host == "0.0.0.0"  # type: ignore[arg-type]
    assert serve_env["POS_BIND_HOST"] == "0.0.0.0"


def test_start_scripts_are_valid_bash() -> None:
    for script in (PROJECT_ROOT / "infra" / "compose").glob("*.sh"):
        assert os.access(script, os.X_OK), script
        done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    "block",
    [
        "authenticator:\n  class_name : org.apache.cassandra.auth.AllowAllAuthenticator\n"
        "authorizer:\n  class_name : org.apache.cassandra.auth.AllowAllAuthorizer\n",
        "authenticator: AllowAllAuthenticator\nauthorizer: AllowAllAuthorizer\n",
    ],
)
def test_cassandra_start_switches_on_password_auth(block: str, tmp_path: Path) -> None:
    script = (PROJECT_ROOT / "infra" / "compose" / "cassandra-start.sh").read_text()
    program = re.search(r"awk '\n(.*?)\n' \"\$conf\"", script, re.S)
    assert program is not None
    conf = tmp_path / "cassandra.yaml"
    conf.write_text(f"cluster_name: pos\n{block}role_manager: CassandraRoleManager\n")
    done = subprocess.run(["awk", program.group(1), str(conf)], capture_output=True, text=True)
    assert yaml.safe_load(done.stdout) == {
        "cluster_name": "pos",
        "authenticator": "PasswordAuthenticator",
        "authorizer": "CassandraAuthorizer",
        "role_manager": "CassandraRoleManager",
    }


def test_dockerfile_installs_from_the_projects_dependency_files() -> None:
    text = DOCKERFILE.read_text()
    runs = " ".join(re.findall(r"^RUN (.*?)(?<!\\)$", text, re.M | re.S))
    pip_installs = re.findall(r"pip install[^&\n]*", runs)
    project_installs = [p for p in pip_installs if "--upgrade pip" not in p]
    assert project_installs
    for cmd in project_installs:
        assert "-c constraints.txt" in cmd, cmd
    # The Makefile's setup step: the project itself, with its extras, from pyproject.toml.
    makefile = (PROJECT_ROOT / "Makefile").read_text()
    assert "-m pip install --quiet -c constraints.txt -e '.[dev,airflow]'" in makefile
    # The dependencies from pyproject.toml's own lists first (a code change reuses that
    # layer), then the project itself with the same extras, editable.
    assert "for x in ('airflow', 'deploy')" in text and "-r /tmp/requirements.txt" in text
    assert "pip install --no-cache-dir --no-deps -c constraints.txt -e '.[airflow,deploy]'" in text
    assert "# syntax=" not in text  # BuildKit's frontend image needs a registry
    assert re.search(r"^COPY pyproject.toml constraints.txt", text, re.M)
    # Jars at build time through the project's own fetching (never at start).
    # The fetching is the development package's, imported from the source tree in the
    # build stage only; the sources leave the image before the project is installed.
    assert "from pos_lambda_dev.runtime import jars" in text and "jars.fetch(" in text
    assert "PYTHONPATH=src:dev/src" in text and "rm -rf dev &&" in text
    assert 'CMD ["pos-provision", "--help"]' in text
    assert "openjdk-17-jre-headless" in text
    users = re.findall(r"^USER (\S+)", text, re.M)
    assert users and users[-1] not in ("root", "0")
    # One image runs every pos-* command: the console scripts are on PATH.
    assert "PATH=/opt/pos/venv/bin:$PATH" in text


def test_compose_commands_exist_in_the_clis(services: dict[str, Any]) -> None:
    import tomllib

    scripts = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    for name, svc in services.items():
        cmd = svc.get("command") or []
        if cmd and cmd[0].startswith("pos-"):
            assert cmd[0] in scripts, name
            help_ = subprocess.run(
                [str(Path(os.sys.executable).parent / cmd[0]), *cmd[1:2], "--help"],
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert help_.returncode == 0, (name, help_.stderr[-500:])


# --- the host-network override the deploy test runs (tests/deploy) -------------------


@pytest.fixture(scope="module")
def on_host_network() -> dict[str, Any]:
    done = _compose("config", files=(COMPOSE_FILE, HOST_NETWORK))
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)


# What the override may change in a pipeline service's environment: where the services
# are and how to reach them (PLAINTEXT, an open Cassandra), and the test's namespace.
HOST_ENDPOINTS = {
    "POS_KAFKA_BOOTSTRAP_SERVERS", "POS_KAFKA_SECURITY_PROTOCOL", "POS_CASSANDRA_HOSTS",
    "POS_CASSANDRA_PORT", "POS_CASSANDRA_KEYSPACE", "POS_TOPIC_TRANSACTIONS",
    "POS_TOPIC_ALERTS", "POS_TOPIC_RECEIPTS", "POS_TOPIC_DEAD_LETTERS", "POS_BIND_HOST",
    "POS_CASSANDRA_USERNAME", "POS_CASSANDRA_PASSWORD",
}  # fmt: skip


def test_host_network_override_keeps_each_pipeline_services_definition(
    services: dict[str, Any], on_host_network: dict[str, Any]
) -> None:
    """The deploy test proves compose.yaml's own services: the override may move them
    onto the host's network and point them at 127.0.0.1, nothing else."""
    hosted = on_host_network["services"]
    for name in (CORE | TOOLS) - UPSTREAM:
        base, host = services[name], hosted[name]
        assert host["network_mode"] == "host", name
        for key in ("image", "command", "entrypoint", "healthcheck", "depends_on", "volumes",
                    "restart", "stop_grace_period", "init"):  # fmt: skip
            assert host.get(key) == base.get(key), f"{name}: {key} differs"
        changed = {
            k for k in base["environment"].keys() | host["environment"].keys()
            if base["environment"].get(k) != host["environment"].get(k)
        }  # fmt: skip
        assert changed <= HOST_ENDPOINTS, f"{name}: {sorted(changed - HOST_ENDPOINTS)}"
    assert hosted["serve"]["environment"]["POS_BIND_HOST"] == "127.0.0.1"
    assert on_host_network["networks"]["default"] == {"external": True, "name": "host"}


def test_host_network_stand_ins_are_healthy_only_when_the_real_service_answers(
    services: dict[str, Any], on_host_network: dict[str, Any]
) -> None:
    hosted = on_host_network["services"]
    for name in ("kafka", "cassandra"):
        assert hosted[name]["image"] == services["speed"]["image"], name
        assert hosted[name]["healthcheck"]["test"] == ["CMD", "pos-provision", "ready", name]
        assert hosted[name]["network_mode"] == "host"
