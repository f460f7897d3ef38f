"""Prometheus for local development and the tests: Debian's `prometheus` package (which
also ships `promtool`), run as a local process on bind_host like Kafka, with its own
data directory.

    ensure_installed()          # apt, through infra/system-deps.sh, when missing
    text = config({"pos-speed": "127.0.0.1:9410"}, RULES, scrape_s=1)
    with running(config_file, data_dir, port=9490, log=...) as url: ...

The shipped configuration is infra/prometheus/prometheus.yml; `config` writes one for
other targets and intervals (the integration test's), with the same alert rules.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path

from pos_lambda.adapters.service import ServiceError, wait_for
from pos_lambda.settings import PROJECT_ROOT

SHIPPED_CONFIG = PROJECT_ROOT / "infra" / "prometheus" / "prometheus.yml"
RULES = PROJECT_ROOT / "infra" / "prometheus" / "alert-rules.yml"


def ensure_installed() -> None:
    """`prometheus` and `promtool` on PATH, installed from Debian's package if missing."""
    if shutil.which("prometheus") and shutil.which("promtool"):
        return
    subprocess.run(
        ["bash", str(PROJECT_ROOT / "infra" / "system-deps.sh"), "prometheus"], check=True
    )


def config(
    targets: Mapping[str, str], rules: Path = RULES, scrape_s: float = 15, evaluate_s: float = 15
) -> str:
    """A prometheus.yml (JSON is YAML) scraping job -> host:port, with `rules`."""
    return json.dumps(
        {
            "global": {"scrape_interval": f"{scrape_s}s", "evaluation_interval": f"{evaluate_s}s"},
            "rule_files": [str(rules)],
            "scrape_configs": [
                {"job_name": job, "static_configs": [{"targets": [target]}]}
                for job, target in targets.items()
            ],
        },
        indent=2,
    )


@contextlib.contextmanager
def running(
    config_file: Path, data_dir: Path, port: int, log: Path, host: str = "127.0.0.1"
) -> Iterator[str]:
    """A Prometheus process on host:port until the block ends; yields its URL."""
    url = f"http://{host}:{port}"
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={config_file}",
                f"--storage.tsdb.path={data_dir}",
                f"--web.listen-address={host}:{port}",
                "--web.enable-lifecycle",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        if not wait_for(lambda: _ready(url) or process.poll() is not None, timeout=60):
            raise ServiceError(f"Prometheus not ready at {url} in 60 s; log {log}")
        if process.poll() is not None:
            raise ServiceError(f"Prometheus exited {process.returncode}; log {log}")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False
