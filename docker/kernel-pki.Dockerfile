# Issuer of the AWS stack's TLS certificates: a Lambda container image, the
# handler of its Custom::CordumTlsCa (the CA, made once and kept) and
# Custom::CordumTlsCertificate (a server certificate the CA signs: the kernel's,
# the NATS nodes') resources (see shared/cordum/safety/kernel_pki.py). It runs
# during deployments that create the CA or issue a certificate, never at request
# time.
#
# Build context: the repository root (see .dockerignore). The CDK app builds
# this image at deploy time for the stack's architecture:
#   docker build -f docker/kernel-pki.Dockerfile .
#
# The AWS base image brings the runtime interface client and boto3; the module
# needs cryptography besides, and nothing of the cordum library.
FROM public.ecr.aws/lambda/python:3.12

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN pip install cryptography==50.0.2 cffi==2.1.1 pycparser==3.12

COPY shared/cordum/safety/kernel_pki.py ${LAMBDA_TASK_ROOT}/kernel_pki.py

CMD ["kernel_pki.handler"]
