"""The schemas and topics operations of the gateway's OpenAPI document (cordum-sdk's
operation ids)."""

from __future__ import annotations

from cordum.gateway.core.openapi import AUTHENTICATED, ApiPart, Operation, codes
from cordum.gateway.schema_registry import models
from cordum.gateway.schema_registry import schemas as s

TAG = "Schemas"
TOPICS = "Topics"
FORBIDDEN = codes(("forbidden", "tenant_access_denied", "tier_limit_exceeded"))
SCHEMA_400 = codes(("CONFIG_SCHEMA_VIOLATION", "invalid_json", "invalid_request",
                    "invalid_tenant"))
TOPIC_400 = codes(("TOPIC_SCHEMA_VIOLATION", "invalid_json", "invalid_request",
                   "invalid_tenant"))
STORE = codes(("store_unavailable",))
WRITE = (400, 409, 413, *AUTHENTICATED)

PART = ApiPart(
    operations=(
        Operation("post", "/api/v1/schemas", "createSchema",
                  "Register a JSON schema (create or replace; admin or schemas.write)", TAG,
                  None, ok_status=204, body=models.SchemaRegisterRequest, errors=WRITE,
                  notes={400: SCHEMA_400, 403: FORBIDDEN, 409: codes(("registry_busy",)),
                         413: codes(("payload_too_large",)), 503: STORE}),
        Operation("get", "/api/v1/schemas", "listSchemas",
                  "The tenant's schemas in id order, each with its document", TAG,
                  s.SchemaList, query=("Limit", "Cursor"), errors=(400, *AUTHENTICATED),
                  notes={400: codes(("invalid_request",)), 503: STORE}),
        Operation("get", "/api/v1/schemas/{id}", "getSchema", "One schema of the tenant", TAG,
                  s.SchemaRecord, errors=(400, 404, *AUTHENTICATED),
                  notes={400: codes(("CONFIG_SCHEMA_VIOLATION",)),
                         404: codes(("CONFIG_SCHEMA_NOT_FOUND",)), 503: STORE}),
        Operation("delete", "/api/v1/schemas/{id}", "deleteSchema",
                  "Delete a schema no topic names (admin or schemas.write)", TAG, None,
                  ok_status=204, errors=(400, 404, 409, *AUTHENTICATED),
                  notes={400: codes(("CONFIG_SCHEMA_VIOLATION", "invalid_tenant")),
                         404: codes(("CONFIG_SCHEMA_NOT_FOUND",)),
                         409: codes(("SCHEMA_IN_USE", "registry_busy")), 503: STORE}),
        Operation("get", "/api/v1/topics", "listTopics",
                  "The tenant's topic registrations in name order", TOPICS, s.TopicList,
                  query=("Limit", "Cursor"), errors=(400, *AUTHENTICATED),
                  notes={400: codes(("invalid_request",)), 503: STORE}),
        Operation("post", "/api/v1/topics", "createTopic",
                  "Register a topic, or replace its registration (admin or topics.write)",
                  TOPICS, s.TopicResponse, ok_status=201, body=models.CreateTopicRequest,
                  also=((200, s.TopicResponse, "An existing registration was replaced"),),
                  errors=WRITE,
                  notes={400: TOPIC_400, 403: FORBIDDEN, 409: codes(("registry_busy",)),
                         413: codes(("payload_too_large",)), 503: STORE}),
        Operation("delete", "/api/v1/topics/{name}", "deleteTopic",
                  "Delete a topic registration (admin or topics.write)", TOPICS, None,
                  ok_status=204, errors=(400, 404, 409, *AUTHENTICATED),
                  notes={400: codes(("TOPIC_SCHEMA_VIOLATION", "invalid_tenant")),
                         404: codes(("TOPIC_NOT_FOUND",)), 409: codes(("registry_busy",)),
                         503: STORE}),
    ),
    tags=((TAG, "The tenant's JSON schemas: what a topic's submits are checked against."),
          (TOPICS, "The tenant's topic registrations: pool, input and output schemas, "
                   "requirements, risk tags and status.")),
)
