"""Lambda: the HTTP API (API Gateway REST proxy)."""

from cordum.gateway.app import handle
from cordum.logs import setup

setup()


def handler(event, context):
    return handle(event, context)
