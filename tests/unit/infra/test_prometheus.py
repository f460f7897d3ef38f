"""The shipped Prometheus files: valid for Debian's promtool, and the alert rules fire
(and stay silent) as promtool's rule tests expect (alert-rules.test.yml beside this)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from pos_lambda_dev.runtime import prometheus_service

HERE = Path(__file__).parent


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    prometheus_service.ensure_installed()  # Debian's package, as `make` would install it
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=60)


def test_the_shipped_configs_and_rules_are_valid() -> None:
    for config in (
        prometheus_service.SHIPPED_CONFIG,
        prometheus_service.SHIPPED_CONFIG.with_name("prometheus.compose.yml"),
    ):
        checked = _promtool("check", "config", str(config))
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert "SUCCESS: 1 rule files found" in checked.stdout
    rules = _promtool("check", "rules", str(prometheus_service.RULES))
    assert rules.returncode == 0, rules.stdout + rules.stderr
    assert "SUCCESS: 9 rules found" in rules.stdout


def test_the_alert_rules_fire_on_their_conditions_only() -> None:
    tested = _promtool("test", "rules", str(HERE / "alert-rules.test.yml"))
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_a_generated_config_scrapes_the_targets_with_the_shipped_rules(tmp_path: Path) -> None:
    text = prometheus_service.config({"pos-speed": "127.0.0.1:9410"}, scrape_s=1, evaluate_s=1)
    assert json.loads(text)["scrape_configs"] == [
        {"job_name": "pos-speed", "static_configs": [{"targets": ["127.0.0.1:9410"]}]}
    ]
    (tmp_path / "prometheus.yml").write_text(text)
    checked = _promtool("check", "config", str(tmp_path / "prometheus.yml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_compose_config_scrapes_the_same_jobs_by_service_name() -> None:
    import yaml

    local, compose = (
        yaml.safe_load(p.read_text())
        for p in (
            prometheus_service.SHIPPED_CONFIG,
            prometheus_service.SHIPPED_CONFIG.with_name("prometheus.compose.yml"),
        )
    )
    assert local["rule_files"] == compose["rule_files"] == ["alert-rules.yml"]
    assert {
        j["job_name"]: j["static_configs"][0]["targets"] for j in compose["scrape_configs"]
    } == {
        "pos-speed": ["speed:9410"],
        "pos-alerts": ["alerts:9411"],
        "pos-receipts": ["receipts:9412"],
        "pos-serving": ["serve:8000"],
    }
    assert [j["job_name"] for j in local["scrape_configs"]] == [
        "pos-speed",
        "pos-alerts",
        "pos-receipts",
        "pos-serving",
    ]
