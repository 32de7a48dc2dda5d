#!/usr/bin/env python3
"""CDK app: the CordumServerless stack.

    cdk deploy -c natsCluster=true                                            # AWS
    cdk deploy -c natsCluster=true -c vpcId=vpc-0123456789abcdef0             # AWS, existing VPC
    cdk deploy -c natsCluster=true -c safetyKernelAddr=host:50051 \
               -c safetyKernelCa=kernel-ca.pem                                # AWS, outside kernel
    cdklocal deploy -c redisUrl=redis://127.0.0.1:6379 -c natsUrl=nats://...  # LocalStack

Context keys are described in cordum_infra/settings.py; ``-c nag=false``
skips the cdk-nag AwsSolutions checks (on by default; a finding fails the
synth). infra/cdk/deploy.py wraps the CLI (pinned aws-cdk / aws-cdk-local,
LocalStack environment).

An AWS stack (no redisUrl) is bound to its account and region when they are
known (context ``account`` / ``region``, else the CLI's CDK_DEFAULT_ACCOUNT /
CDK_DEFAULT_REGION): that is what lets it look up an existing VPC, the
region's zones and its S3 prefix list. A local stack stays
environment-agnostic, as LocalStack expects.
"""

from __future__ import annotations

import os
import sys

import aws_cdk as cdk
from cordum_infra.nag import add_checks
from cordum_infra.network_settings import deployment_target
from cordum_infra.settings import ContextError, StackSettings
from cordum_infra.stack import STACK_NAME, CordumServerlessStack


def main() -> None:
    app = cdk.App()
    try:
        settings = StackSettings.from_context(app.node)
        env = None
        if settings.creates_cache:
            target = deployment_target(app.node.try_get_context, os.environ)
            if target is not None:
                env = cdk.Environment(account=target[0], region=target[1])
        stack = CordumServerlessStack(
            app,
            STACK_NAME,
            settings=settings,
            env=env,
            description="Cordum control plane: REST API, queues, functions, schedules",
        )
    except ContextError as exc:
        sys.exit(f"error: {exc}")
    if str(app.node.try_get_context("nag") or "true").lower() != "false":
        add_checks(app, stack)
    app.synth()


if __name__ == "__main__":
    main()
