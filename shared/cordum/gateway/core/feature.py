"""What ``cordum.gateway.app`` takes of a feature: the routes module of its package.

The module's Router serves the feature's paths; :meth:`Feature.contract` loads the
feature's part of the OpenAPI document, on the first document request only (it
imports the feature's response models).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler.api_gateway import Router

    from cordum.gateway.core.openapi import ApiPart


class Feature(Protocol):
    router: Router

    def contract(self) -> ApiPart: ...
