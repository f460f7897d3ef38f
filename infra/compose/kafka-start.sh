#!/bin/bash
# Kafka in compose: start the image's own launcher, then give the pipeline its SCRAM
# login through the broker-internal listener (127.0.0.1 inside this container only),
# and mark the broker ready for the health check. Clients reach SASL listeners only.
set -euo pipefail
: "${KAFKA_PIPELINE_USER:?}" "${KAFKA_PIPELINE_PASSWORD:?}"
rm -f /tmp/pos-scram-ready
/etc/kafka/docker/run &
broker=$!
trap 'kill -TERM "$broker"; wait "$broker"' TERM INT
until /opt/kafka/bin/kafka-configs.sh --bootstrap-server 127.0.0.1:19092 --alter \
    --entity-type users --entity-name "$KAFKA_PIPELINE_USER" \
    --add-config "SCRAM-SHA-512=[password=${KAFKA_PIPELINE_PASSWORD}]" >/dev/null 2>&1; do
  kill -0 "$broker" 2>/dev/null || exit 1
  sleep 2
done
touch /tmp/pos-scram-ready
wait "$broker"
