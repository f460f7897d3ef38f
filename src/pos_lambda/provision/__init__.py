"""Provisioning the services a deployment points the pipeline at: the Cassandra schema,
the Kafka topics, the pipeline's own Cassandra role, and readiness probes. Product code
(`pos-provision`, run by compose.yaml's one-shot init services and the image); the local
development runtime (`pos-infra`, package `pos_lambda_dev`) calls the same functions."""
