# The pipeline image: every pos-* command of the product (pos-speed, pos-batch, pos-serve,
# pos-alerts, pos-producer, pos-provision), Airflow 3 with the DAGs, and Spark's standalone
# master and worker from the pinned PySpark's own scripts, so driver and cluster share one
# version. The development package (dev/: pos-infra, pos-demo, pos-chaos) is not installed.
#   docker build -t pos-lambda .        (compose.yaml builds it for you)
# Installed the way `make setup` does it: pip with -c constraints.txt and the pinned
# pyproject.toml; the Spark jars are fetched here, at build time, by the project's own
# jar fetching (dev/src/pos_lambda_dev/runtime/jars.py + infra/jars/spark/pom.xml), never at
# container start. That module is the development package's (it reads the poms of the
# repository): this build stage imports it from the source tree; the image never has it.

ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

# --- build: venv from the pinned dependency files, and the jars through Maven ------------
FROM ${PYTHON_IMAGE} AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      openjdk-17-jdk-headless maven \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/pos/app
# The dependency files first, so a code change does not refetch the jars.
COPY pyproject.toml constraints.txt ./
COPY infra/jars/ infra/jars/
# Only the modules the jar fetching imports, so a change elsewhere keeps this layer.
COPY src/pos_lambda/__init__.py src/pos_lambda/settings.py src/pos_lambda/
COPY src/pos_lambda/adapters/__init__.py src/pos_lambda/adapters/service.py src/pos_lambda/adapters/
COPY dev/src/pos_lambda_dev/__init__.py dev/src/pos_lambda_dev/
COPY dev/src/pos_lambda_dev/runtime/__init__.py dev/src/pos_lambda_dev/runtime/jars.py dev/src/pos_lambda_dev/runtime/
RUN python -m venv /opt/pos/venv \
 && /opt/pos/venv/bin/pip install --no-cache-dir --upgrade pip \
 && /opt/pos/venv/bin/pip install --no-cache-dir -c constraints.txt pydantic-settings
RUN POS_JARS_DIR=/opt/pos/jars PYTHONPATH=src:dev/src /opt/pos/venv/bin/python -c \
      "from pos_lambda_dev.runtime import jars; from pos_lambda.settings import load_settings; \
       print(jars.fetch(load_settings(), ('spark',)))"
# The dependencies next, read from pyproject.toml alone (extras: airflow, since the DAGs
# run in this image too, and deploy, Airflow's PostgreSQL driver; dev stays out), with
# the same constraints as the Makefile's setup step: a change to the code reuses them.
RUN /opt/pos/venv/bin/python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
      print('\n'.join(p['dependencies'] + [d for x in ('airflow', 'deploy') for d in p['optional-dependencies'][x]]))" \
      > /tmp/requirements.txt \
 && /opt/pos/venv/bin/pip install --no-cache-dir -c constraints.txt -r /tmp/requirements.txt
COPY . .
# The project itself, as `make setup` installs it (editable, so src/ is the code); the
# development package's sources leave the image (the product never imports them).
RUN rm -rf dev && /opt/pos/venv/bin/pip install --no-cache-dir --no-deps -c constraints.txt -e '.[airflow,deploy]'

# --- runtime: a JRE 17, the venv, the jars, a non-root user ------------------------------
FROM ${PYTHON_IMAGE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      openjdk-17-jre-headless procps tini \
 && rm -rf /var/lib/apt/lists/* \
 && ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /usr/lib/jvm/jre-17 \
 && useradd --uid 10001 --user-group --create-home --home-dir /home/pos pos \
 && mkdir -p /data /opt/airflow \
 && chown pos:pos /data /opt/airflow
COPY --from=build /opt/pos /opt/pos
ENV PATH=/opt/pos/venv/bin:$PATH \
    JAVA_HOME=/usr/lib/jvm/jre-17 \
    POS_JAVA_HOME=/usr/lib/jvm/jre-17 \
    PYSPARK_PYTHON=/opt/pos/venv/bin/python \
    PYSPARK_DRIVER_PYTHON=/opt/pos/venv/bin/python \
    POS_JARS_DIR=/opt/pos/jars \
    POS_STATE_DIR=/data/state \
    POS_DATA_DIR=/data/pipeline \
    POS_AIRFLOW_DAGS_DIR=/opt/pos/app/dags \
    AIRFLOW_HOME=/opt/airflow \
    PYTHONUNBUFFERED=1
WORKDIR /opt/pos/app
USER pos
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["pos-provision", "--help"]
