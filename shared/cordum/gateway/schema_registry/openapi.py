"""The schemas operations of the gateway's OpenAPI document."""

from __future__ import annotations

from cordum.gateway.core.openapi import ApiPart

TAG = "Schemas"

PART = ApiPart(operations=(), tags=())
