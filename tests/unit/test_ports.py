"""The ports (src/pos_lambda/adapters/): the Kafka port's real clients take their
configuration from it, with a caller's overrides on top, and no code outside adapters/
builds a confluent-kafka client itself."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar

import confluent_kafka
import pytest

from pos_lambda.adapters.kafka_clients import ConfluentClients

ROOT = Path(__file__).resolve().parents[2]
CODE = [ROOT / "src" / "pos_lambda", ROOT / "dev" / "src" / "pos_lambda_dev"]
ADAPTERS = ROOT / "src" / "pos_lambda" / "adapters"


class _Recorder:
    made: ClassVar[list[dict[str, Any]]] = []

    def __init__(self, config: dict[str, Any]) -> None:
        self.made.append(config)


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    _Recorder.made = []
    monkeypatch.setattr(confluent_kafka, "Producer", _Recorder)
    monkeypatch.setattr(confluent_kafka, "Consumer", _Recorder)
    return _Recorder.made


def test_a_producer_is_the_ports_idempotent_one_with_the_callers_overrides(
    made: list[dict[str, Any]],
) -> None:
    clients = ConfluentClients("k1:9092", {"security.protocol": "SASL_SSL"})
    logger = object()
    clients.producer(logger=logger)
    assert made == [
        {
            "security.protocol": "SASL_SSL",
            "bootstrap.servers": "k1:9092",
            "log_level": 3,
            "topic.metadata.refresh.interval.ms": 5000,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "compression.type": "lz4",
            "logger": logger,
        }
    ]


def test_an_offsets_reader_never_auto_commits_and_takes_overrides(
    made: list[dict[str, Any]],
) -> None:
    ConfluentClients("k1:9092").offsets_reader("pos-chaos-count", log_level=2)
    assert made == [
        {
            "bootstrap.servers": "k1:9092",
            "log_level": 2,
            "topic.metadata.refresh.interval.ms": 5000,
            "group.id": "pos-chaos-count",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    ]


def _python_files() -> list[Path]:
    return [p for root in CODE for p in sorted(root.rglob("*.py"))]


def test_no_kafka_client_is_built_outside_the_port() -> None:
    built = re.compile(r"\b(Producer|Consumer|AdminClient)\(")
    found = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in _python_files()
        if ADAPTERS not in p.parents
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if built.search(line)
    ]
    assert found == []


def test_no_private_confluent_kafka_module_is_imported() -> None:
    private = re.compile(r"confluent_kafka\.[a-z_.]*\._")
    found = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in _python_files()
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if private.search(line)
    ]
    assert found == []


# --- the Cassandra port -------------------------------------------------------------

# Still opening their own sessions, to be moved to the port: files being changed by
# others while the port landed (issue 75).
OWN_SESSIONS_LEFT = {
    "src/pos_lambda/batch_layer/pointer.py",
    "src/pos_lambda/serving/views.py",
}


class _Cluster:
    def __init__(self, refuse: bool = False) -> None:
        self.refuse, self.keyspaces, self.shut = refuse, list[str | None](), 0

    def connect(self, keyspace: str | None = None) -> str:
        self.keyspaces.append(keyspace)
        if self.refuse:
            raise ConnectionError("NoHostAvailable")
        return f"session of {keyspace}"

    def shutdown(self) -> None:
        self.shut += 1


def test_a_session_is_in_the_keyspace_and_its_cluster_shuts_down_on_leaving(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pos_lambda.adapters import cassandra_client
    from pos_lambda.settings import Settings

    made: list[tuple[_Cluster, dict[str, Any]]] = []

    def cluster(settings: Settings, **options: Any) -> _Cluster:
        made.append((_Cluster(), options))
        return made[-1][0]

    monkeypatch.setattr(cassandra_client, "cluster", cluster)
    settings = Settings(cassandra_keyspace="pos_x")
    with cassandra_client.open_session(settings, writes=True, timeout=3.0) as session:
        assert session == "session of pos_x"
        assert made[0][0].shut == 0
    assert made[0][0].shut == 1
    assert made[0][1] == {"writes": True, "timeout": 3.0, "only_host": None}

    kept = cassandra_client.open_session(settings, keyspace=False)
    assert kept.session == "session of None"
    kept.close()
    assert made[1][0].shut == 1


def test_a_session_that_cannot_connect_leaves_no_cluster_behind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pos_lambda.adapters import cassandra_client
    from pos_lambda.settings import Settings

    refusing = _Cluster(refuse=True)
    monkeypatch.setattr(cassandra_client, "cluster", lambda settings, **options: refusing)
    with pytest.raises(ConnectionError):
        cassandra_client.open_session(Settings())
    assert refusing.shut == 1


def test_no_cassandra_session_is_opened_outside_the_port() -> None:
    opens = re.compile(r"cassandra_client\.cluster\(|\bCluster\(|cassandra_client import cluster\b")
    found = {
        p.relative_to(ROOT).as_posix()
        for p in _python_files()
        if ADAPTERS not in p.parents
        for line in p.read_text().splitlines()
        if opens.search(line)
    }
    assert found == OWN_SESSIONS_LEFT
