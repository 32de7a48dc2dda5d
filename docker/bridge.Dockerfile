# cordum-bridge: JetStream job subjects -> SQS, heartbeats -> the worker snapshot.
#
# Build context: the repository root (see .dockerignore). The CDK app builds
# this image at deploy time for the stack's architecture:
#   docker build -f docker/bridge.Dockerfile .
#
# Settings come from the environment (cordum.config, cordum.bus.settings):
# REDIS_URL, NATS_URL, SUBMIT_QUEUE_URL, RESULT_QUEUE_URL, AWS_REGION, LOG_LEVEL.
# The shipped config/ (pools.yaml for the heartbeat ingest) is baked in.
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONPATH=/app/shared \
    CORDUM_CONFIG_DIR=/app/config

WORKDIR /app

# The layer's fully pinned set (installed with --no-deps, as layers/build.py
# does), plus the AWS SDK the Lambda runtime provides to the functions but a
# container must bring itself. Pins as in pyproject.toml and its lock.
COPY layers/requirements.txt /tmp/requirements.txt
RUN pip install --no-deps -r /tmp/requirements.txt \
        boto3==1.43.11 \
        botocore==1.43.127 \
        s3transfer==0.17.1 \
        python-dateutil==2.9.0.post0 \
        six==1.17.0 \
        urllib3==2.8.0 \
    && rm /tmp/requirements.txt

COPY shared/ /app/shared/
COPY config/ /app/config/

RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin cordum
USER 10001

# No HEALTHCHECK here: the bridge serves no port, and the ECS task definition
# carries its check (`python -m cordum.bus.health`, the liveness file the bridge
# touches while JetStream answers its consumer-lag probes). A bridge that cannot
# reach NATS or SQS keeps retrying (and logs it); once the file goes stale, ECS
# replaces the task, as it does when the bridge crashes.
#
# Exec form: python is PID 1 and gets ECS's SIGTERM itself; the bridge then
# finishes in-flight forwards and drains NATS before it exits.
ENTRYPOINT ["python", "-m", "cordum.bus.bridge"]
