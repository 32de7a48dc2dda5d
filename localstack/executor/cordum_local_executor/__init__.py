"""A LocalStack Lambda runtime executor that runs functions as local processes.

``runtime_api`` and ``bootstrap`` use the standard library only; ``executor``
and ``plugin`` run inside LocalStack.
"""
