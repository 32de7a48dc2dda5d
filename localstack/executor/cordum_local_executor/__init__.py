"""A LocalStack Lambda runtime executor that runs functions as local processes.

``runtime_api``, ``invocation``, ``function_output`` and ``bootstrap`` use the
standard library only; ``executor`` and ``plugin`` run inside LocalStack.
"""
