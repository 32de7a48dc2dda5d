"""Paths of the public contract, named by the routes that serve them and by the document
that lists them (``cordum.gateway.docs.openapi``); neither imports the other."""

from __future__ import annotations

DOCUMENT_PATH = "/api/v1/openapi.json"
DOCS_PATH = "/api/v1/docs"
