#!/bin/sh
# Entrypoint of the stack's NATS server image (docker/nats.Dockerfile).
#
# ECS hands the node its certificate, key and password as secrets in the
# environment; nats-server reads TLS material from files only. This writes them
# (mode 600, in a directory of the server's own user), writes the configuration,
# and runs nats-server with it and with the task's command line.
#
# Environment:
#   NATS_TLS_CERT, NATS_TLS_KEY  PEM certificate and key of the node (secrets)
#   NATS_TLS_CA                  PEM of the CA that signed them
#   NATS_USER, NATS_PASSWORD     the one client and route user (secrets); the
#                                configuration refers to them, never copies them,
#                                except in the route URLs below
#   NATS_ROUTES                  host:port of every node's cluster port, comma
#                                separated; empty or unset: a single node, no cluster
#   NATS_CLUSTER_ADVERTISE       host:port the other nodes reach this one at
#   NATS_CLUSTER_PORT            cluster listen port (default 6222)
#   NATS_CLUSTER_NAME            (default cordum)
#   NATS_CONFIG_DIR              where the files go (default /tmp/nats)
set -eu

dir="${NATS_CONFIG_DIR:-/tmp/nats}"
umask 077
mkdir -p "$dir"
printf '%s\n' "$NATS_TLS_CERT" >"$dir/server.pem"
printf '%s\n' "$NATS_TLS_KEY" >"$dir/server-key.pem"
printf '%s\n' "$NATS_TLS_CA" >"$dir/ca.pem"
: "${NATS_USER:?}" "${NATS_PASSWORD:?}"

tls_block() {
    cat <<CONF
  tls {
    cert_file: "$dir/server.pem"
    key_file: "$dir/server-key.pem"
    ca_file: "$dir/ca.pem"
    timeout: 5
  }
CONF
}

conf="$dir/nats.conf"
{
    echo "# Written by nats-entrypoint.sh at container start."

    tls_block
    # $NATS_USER / $NATS_PASSWORD: nats-server resolves them from the environment.
    echo '  authorization { user: $NATS_USER, password: $NATS_PASSWORD }'
    if [ -n "${NATS_ROUTES:-}" ]; then
        echo "  cluster {"
        echo "    name: \"${NATS_CLUSTER_NAME:-cordum}\""
        echo "    listen: \"0.0.0.0:${NATS_CLUSTER_PORT:-6222}\""
        # Other nodes are told this name, never the task's IP address: the
        # certificate holds names only.
        echo "    advertise: \"${NATS_CLUSTER_ADVERTISE:?}\""
        # Clients are given the servers in their URL; a gossiped address would be
        # an IP their TLS check refuses.
        echo "    no_advertise: true"
        echo '    authorization { user: $NATS_USER, password: $NATS_PASSWORD }'
        tls_block | sed 's/^/  /'
        echo "    routes: ["
        for route in $(echo "$NATS_ROUTES" | tr ',' ' '); do
            # The generated password is letters and digits: safe in a URL.
            echo "      \"nats-route://$NATS_USER:$NATS_PASSWORD@$route\""
        done
        echo "    ]"
        echo "  }"
    fi
} >"$conf"

exec nats-server --config "$conf" "$@"
