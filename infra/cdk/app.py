#!/usr/bin/env python3
"""CDK app: the CordumServerless stack.

    cdk deploy -c natsUrl=nats://...                                          # AWS
    cdk deploy -c natsUrl=nats://... -c safetyKernelAddr=host:50051 \
               -c safetyKernelCa=kernel-ca.pem                                # AWS, own kernel
    cdklocal deploy -c redisUrl=redis://127.0.0.1:6379 -c natsUrl=nats://...  # LocalStack

Context keys are described in cordum_infra/settings.py; ``-c nag=false``
skips the cdk-nag AwsSolutions checks (on by default; a finding fails the
synth). infra/cdk/deploy.py wraps the CLI (pinned aws-cdk / aws-cdk-local,
LocalStack environment).
"""

from __future__ import annotations

import sys

import aws_cdk as cdk
from cordum_infra.nag import add_checks
from cordum_infra.settings import ContextError, StackSettings
from cordum_infra.stack import STACK_NAME, CordumServerlessStack


def main() -> None:
    app = cdk.App()
    try:
        settings = StackSettings.from_context(app.node)
    except ContextError as exc:
        sys.exit(f"error: {exc}")
    stack = CordumServerlessStack(
        app,
        STACK_NAME,
        settings=settings,
        description="Cordum control plane: REST API, queues, functions, schedules",
    )
    if str(app.node.try_get_context("nag") or "true").lower() != "false":
        add_checks(app, stack)
    app.synth()


if __name__ == "__main__":
    main()
