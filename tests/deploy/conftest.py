"""The deploy test runs against the project's own Kafka and Cassandra: the integration
fixtures that start them (or reuse running ones) through the same code as `make up`."""

from tests.integration.conftest import base_settings, services

__all__ = ["base_settings", "services"]
