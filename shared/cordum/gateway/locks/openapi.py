"""The locks operations of the gateway's OpenAPI document."""

from __future__ import annotations

from cordum.gateway.core.openapi import ApiPart

TAG = "Locks"

PART = ApiPart(operations=(), tags=())
