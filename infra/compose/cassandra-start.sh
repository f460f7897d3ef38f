#!/bin/bash
# Cassandra in compose: the official image with PasswordAuthenticator and
# CassandraAuthorizer switched on (its cassandra.yaml has AllowAll* by default, as a
# plain value or as a class_name block), then the image's own entrypoint.
set -euo pipefail
conf=/etc/cassandra/cassandra.yaml
awk '
  /^(authenticator|authorizer):/ { key = $1; skip = 1
    print (key == "authenticator:" ? "authenticator: PasswordAuthenticator" \
                                   : "authorizer: CassandraAuthorizer"); next }
  skip && /^[ \t]/ { next }
  { skip = 0; print }
' "$conf" > /tmp/cassandra.yaml
cat /tmp/cassandra.yaml > "$conf"
exec docker-entrypoint.sh "$@"
