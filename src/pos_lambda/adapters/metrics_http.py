"""The metrics port of a long-running process (`pos-speed run`, `pos-alerts run`):
prometheus-client's own HTTP server, OpenMetrics when the scraper asks for it (Prometheus
does), on bind_host only.

Metrics never stop the pipeline: a port already taken (a second instance on the host)
is logged, and the process runs on without metrics.
"""

from __future__ import annotations

import logging
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.registry import Collector

log = logging.getLogger("pos.metrics")


def registry_of(*collectors: Collector) -> CollectorRegistry:
    """A registry of these collectors only (no process or platform defaults: a
    process's metrics are the pipeline's)."""
    registry = CollectorRegistry(auto_describe=False)
    for collector in collectors:
        registry.register(collector)
    return registry


def serve(registry: CollectorRegistry, host: str, port: int, what: str) -> Any | None:
    """Serve `registry` at http://host:port/metrics in a daemon thread; the server, or
    None (port 0, or the port could not be bound)."""
    if port == 0:
        return None
    try:
        server, _thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        log.error("%s: cannot serve metrics on %s:%d (%s); running without them", what, host,
                  port, exc)  # fmt: skip
        return None
    log.info("%s: metrics at http://%s:%d/metrics", what, host, port)
    return server
