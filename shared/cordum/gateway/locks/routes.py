"""Named locks for agents that share a resource (/api/v1/locks)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_lambda_powertools.event_handler.api_gateway import Router

if TYPE_CHECKING:
    from cordum.gateway.core.openapi import ApiPart

router = Router()


def contract() -> ApiPart:
    """This feature's part of the OpenAPI document (loaded with the document)."""
    from cordum.gateway.locks import openapi

    return openapi.PART
