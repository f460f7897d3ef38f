"""The speed layer: Spark Structured Streaming jobs from Kafka to the master dataset and
the Cassandra speed views. Run it with `pos-speed run` (src/pos_lambda/speed_layer/cli.py)."""

# Set by `pos-speed run` (the supervisor) for its driver process.
SUPERVISOR_PID_ENV = "POS_SPEED_SUPERVISOR_PID"
