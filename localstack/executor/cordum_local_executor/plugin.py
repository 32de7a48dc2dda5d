"""The plugin LocalStack finds through the ``localstack.lambda.runtime_executor`` entry point.

Selected with ``LAMBDA_RUNTIME_EXECUTOR=cordum-local``. The executor module is
imported only when LocalStack loads the plugin, as LocalStack does for its own.
"""

from __future__ import annotations

from localstack.services.lambda_.invocation.plugins import RuntimeExecutorPlugin


class CordumLocalExecutorPlugin(RuntimeExecutorPlugin):
    name = "cordum-local"

    def load(self, *args, **kwargs):
        from cordum_local_executor.executor import LocalProcessRuntimeExecutor

        return LocalProcessRuntimeExecutor
