# cordum-safety-kernel: CAP's SafetyKernel gRPC service, policy from config/safety.yaml.
#
# Build context: the repository root (see .dockerignore). The CDK app builds
# this image at deploy time for the stack's architecture:
#   docker build -f docker/safety-kernel.Dockerfile .
#
# The shipped config/ is baked in; the kernel hot-reloads safety.yaml, so a
# file mounted over /app/config/safety.yaml takes effect without a restart.
# Optional settings from the environment: LOG_LEVEL, REDIS_URL and
# REDIS_AUTH_TOKEN (velocity windows shared by all replicas),
# SAFETY_DECISION_CACHE_TTL, SAFETY_KERNEL_TLS_CERT / SAFETY_KERNEL_TLS_KEY (PEM
# text or file paths; the AWS stack hands both over from Secrets Manager).
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONPATH=/app/shared \
    CORDUM_CONFIG_DIR=/app/config

WORKDIR /app

# The layer's fully pinned set, installed with --no-deps as layers/build.py does.
COPY layers/requirements.txt /tmp/requirements.txt
RUN pip install --no-deps -r /tmp/requirements.txt && rm /tmp/requirements.txt

COPY shared/ /app/shared/
COPY config/ /app/config/

RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin cordum
USER 10001

EXPOSE 50051

# The kernel serves no gRPC health service: a TCP connect to its port is the probe.
HEALTHCHECK --interval=15s --timeout=3s --start-period=15s --retries=3 \
    CMD ["python", "-c", "import socket; socket.create_connection(('127.0.0.1', 50051), 2)"]

# Exec form: python is PID 1 and gets SIGTERM itself (server.stop with a 5 s grace).
ENTRYPOINT ["python", "-m", "cordum.safety.kernel"]
CMD ["--addr", "0.0.0.0:50051"]
