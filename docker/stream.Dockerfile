# cordum-stream: live job and workflow events over WebSocket and Server-Sent Events.
#
# Build context: the repository root (see .dockerignore). The CDK app builds
# this image at deploy time for the stack's architecture (cordum_infra.stream):
#   docker build -f docker/stream.Dockerfile .
#
# Settings come from the environment: REDIS_URL (REDIS_USERNAME and
# REDIS_AUTH_TOKEN on AWS), NATS_URL (NATS_CREDS_SECRET_ARN, NATS_TLS_CA),
# CORDUM_API_KEYS_SECRET_ID (the gateway's keys secret), AWS_REGION, LOG_LEVEL,
# STREAM_PORT (default 8090). Metrics are EMF lines on stdout.
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONPATH=/app/shared \
    CORDUM_CONFIG_DIR=/app/config \
    STREAM_PORT=8090

WORKDIR /app

# The layer's fully pinned set (installed with --no-deps, as layers/build.py
# does), plus the AWS SDK the Lambda runtime provides to the functions but a
# container must bring itself (the API keys' secret, NATS credentials), and the
# HTTP and WebSocket server (aiohttp and what it needs; the layer has no use for
# it). Pins as in pyproject.toml and the project's venv, and as
# docker/bridge.Dockerfile.
COPY layers/requirements.txt /tmp/requirements.txt
RUN pip install --no-deps -r /tmp/requirements.txt \
        boto3==1.43.11 \
        botocore==1.43.127 \
        s3transfer==0.17.1 \
        python-dateutil==2.9.0.post0 \
        six==1.17.0 \
        urllib3==2.8.0 \
        aiohttp==3.14.5 \
        aiohappyeyeballs==2.7.1 \
        aiosignal==1.4.0 \
        frozenlist==1.8.0 \
        multidict==7.2.1 \
        propcache==0.5.4 \
        yarl==1.25.1 \
        idna==3.20 \
    && rm /tmp/requirements.txt

COPY shared/ /app/shared/
COPY config/ /app/config/

RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin cordum
USER 10001

EXPOSE 8090

# /health answers 200 while the process's NATS and Redis connections are up, 503
# otherwise; urlopen raises on anything but a 2xx, so the probe fails then. The ECS
# task definition repeats this check (ECS does not read HEALTHCHECK), and the load
# balancer checks the same path.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request as u; u.urlopen('http://127.0.0.1:%s/health' % os.environ.get('STREAM_PORT', '8090'), timeout=3)"]

# Exec form: python is PID 1 and gets ECS's SIGTERM itself, then closes its
# client connections (they reconnect to another task) before it exits.
ENTRYPOINT ["python", "-m", "cordum.stream"]
