"""The config service: documents per scope and the effective config."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_lambda_powertools.event_handler.api_gateway import Router

if TYPE_CHECKING:
    from cordum.gateway.core.openapi import ApiPart

router = Router()


def contract() -> ApiPart:
    """This feature's part of the OpenAPI document (loaded with the document)."""
    from cordum.gateway.configs import openapi

    return openapi.PART
