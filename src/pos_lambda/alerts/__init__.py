"""Real-time alerts, exactly once: rules (pure), the transactional processor, the
state restore, the Cassandra sink and the `pos-alerts` CLI. See alerts/processor.py."""
