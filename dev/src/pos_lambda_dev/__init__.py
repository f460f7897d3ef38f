"""Development tooling of the POS Lambda pipeline, never shipped with the product:

- `runtime/`: the local development runtime (`pos-infra`): Kafka, Cassandra, Spark and
  Airflow as local processes, their jars, the JDK;
- `demo/`: the end-to-end story (`pos-demo`) and the chaos run (`pos-chaos`);
- `releases.py`: the releases (releases.json) and the compatibility rule's fingerprints.

Installed by `make setup` (`pip install -e ./dev`, after the product). It imports the
product (`pos_lambda`); the product never imports it (tests/unit/test_layout.py).
"""
