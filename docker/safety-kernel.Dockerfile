# cordum-safety-kernel: CAP's SafetyKernel gRPC service, policy from config/safety.yaml.
#
# Build context: the repository root (see .dockerignore). The CDK app builds
# this image at deploy time for the stack's architecture:
#   docker build -f docker/safety-kernel.Dockerfile .
#
# The shipped config/ is baked in (a plain `docker run` serves it); the kernel
# hot-reloads safety.yaml, so a file mounted over /app/config/safety.yaml takes
# effect without a restart. On AWS the policy is not taken from the image:
# CORDUM_POLICY_URI=s3://<bucket>/<key> (the stack's policy bucket) is copied over
# /app/config/safety.yaml before the kernel serves, and a kernel that cannot read
# it exits non-zero (cordum.safety.policy_source).
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
# The layer leaves boto3 to the Lambda runtime; the kernel needs it for its policy
# object. The set the tests run against, pinned the same way.
RUN pip install --no-deps boto3==1.43.11 botocore==1.43.127 s3transfer==0.17.1 urllib3==2.8.0

COPY shared/ /app/shared/
COPY config/ /app/config/
# Owned by the kernel's user: it writes the policy it downloads into this folder
# (a few KB of YAML: the extra layer costs nothing).
RUN chown -R 10001:10001 /app/config

RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin cordum
USER 10001

EXPOSE 50051

# The kernel serves no gRPC health service: a TCP connect to its port is the probe.
HEALTHCHECK --interval=15s --timeout=3s --start-period=15s --retries=3 \
    CMD ["python", "-c", "import socket; socket.create_connection(('127.0.0.1', 50051), 2)"]

# Exec form: python is PID 1 and gets SIGTERM itself (server.stop with a 5 s grace).
ENTRYPOINT ["python", "-m", "cordum.safety.kernel"]
CMD ["--addr", "0.0.0.0:50051"]
