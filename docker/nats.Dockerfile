# Development NATS server (devNats=true): the official NATS 2.10 image, rebuilt
# at deploy time so that it lands in the stack's own ECR asset repository (a
# VPC with endpoints only can pull from there, not from Docker Hub).
# The alpine flavour has the wget the ECS health check uses (/healthz on 8222).
# The command line (JetStream, store on the EFS mount) is set by the task
# definition in infra/cdk/cordum_infra/nats.py.
FROM nats:2.10-alpine
