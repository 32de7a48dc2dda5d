# NATS server of the stack (natsCluster=true: three nodes; devNats=true: one): the
# official NATS 2.10 image, rebuilt at deploy time so that it lands in the stack's
# own ECR asset repository (a VPC with endpoints only can pull from there, not from
# Docker Hub). The alpine flavour has the sh the entrypoint needs and the wget the
# ECS health check uses (/healthz on 8222).
# nats-entrypoint.sh writes the TLS files and the configuration (client TLS,
# password, cluster routes) from the task's environment; the task definition in
# infra/cdk/cordum_infra/nats_cluster.py passes the rest on the command line.
FROM nats:2.10-alpine
# Run through sh: no execute bit or BuildKit --chmod needed.
COPY nats-entrypoint.sh /usr/local/bin/nats-entrypoint.sh
ENTRYPOINT ["/bin/sh", "/usr/local/bin/nats-entrypoint.sh"]
