"""Which Spark drivers `pos-speed run` starts for its queries (pure: no processes)."""

from __future__ import annotations

import pytest

from pos_lambda.settings import load_settings
from pos_lambda.speed_layer.supervisor import Driver, drivers_for

BOTH = ("archiver", "views")


@pytest.fixture(autouse=True)
def _defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("POS_SPEED_DRIVERS", "POS_SPEED_ARCHIVER_NICE", "POS_SPARK_MASTER"):
        monkeypatch.delenv(name, raising=False)


def test_in_local_mode_each_query_has_a_driver_and_the_archiver_yields_the_cpu() -> None:
    assert drivers_for(load_settings(), BOTH) == [Driver(("archiver",), 19), Driver(("views",), 0)]


def test_a_one_shot_run_shares_one_driver_unless_told_per_query() -> None:
    assert drivers_for(load_settings(), BOTH, available_now=True) == [Driver(BOTH, 0)]
    per_query = load_settings(speed_drivers="per-query")
    assert drivers_for(per_query, BOTH, available_now=True) == [
        Driver(("archiver",), 19),
        Driver(("views",), 0),
    ]


def test_on_a_cluster_master_both_queries_share_one_driver() -> None:
    s = load_settings(spark_master="spark://10.0.0.5:7077")
    assert drivers_for(s, BOTH) == [Driver(BOTH, 0)]


def test_shared_and_per_query_are_chosen_by_the_setting() -> None:
    assert drivers_for(load_settings(speed_drivers="shared"), BOTH) == [Driver(BOTH, 0)]
    per_query = load_settings(speed_drivers="per-query", spark_master="spark://h:7077")
    assert drivers_for(per_query, BOTH) == [Driver(("archiver",), 19), Driver(("views",), 0)]


def test_the_archivers_niceness_is_a_setting_and_zero_means_same_priority() -> None:
    s = load_settings(speed_archiver_nice=0)
    assert drivers_for(s, BOTH) == [Driver(("archiver",), 0), Driver(("views",), 0)]


def test_one_job_runs_in_one_driver_at_normal_priority() -> None:
    assert drivers_for(load_settings(), ("archiver",)) == [Driver(("archiver",), 0)]
    assert drivers_for(load_settings(), ("views",)) == [Driver(("views",), 0)]


@pytest.mark.parametrize(
    ("name", "value"),
    [("speed_drivers", "both"), ("speed_archiver_nice", 20), ("speed_archiver_nice", -1)],
)
def test_invalid_driver_settings_are_refused(name: str, value: object) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=name):
        load_settings(**{name: value})


def test_a_bounded_run_compiles_with_c1_only_unless_told_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("POS_SPARK_DRIVER_JAVA_OPTIONS", raising=False)
    monkeypatch.delenv("POS_SPARK_BOUNDED_JAVA_OPTIONS", raising=False)
    shipped = load_settings().bounded()
    assert shipped.spark.driver_java_options == (
        "-XX:+UseParallelGC -XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
    )
    tiered = load_settings(spark_bounded_java_options="").bounded()
    assert tiered.spark.driver_java_options == "-XX:+UseParallelGC"
    g1 = load_settings(spark_driver_java_options="").bounded()
    assert g1.spark.driver_java_options == "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
