"""The config operations of the gateway's OpenAPI document: documents per scope, the
effective config, and writes."""

from __future__ import annotations

from cordum.gateway.configs import models
from cordum.gateway.configs import schemas as s
from cordum.gateway.core.openapi import AUTHENTICATED, ApiPart, Operation, codes

TAG = "Config"
PATH = "/api/v1/config"
READ_403 = codes(("forbidden", "tenant_access_denied", "config_key_forbidden"))
WRITE_NOTES = {
    400: codes(("invalid_request", "invalid_json", "config_request_invalid",
                "config_too_large", "config_too_deep", "config_schema_violation",
                "config_key_forbidden")),
    403: codes(("forbidden", "tenant_access_denied", "config_key_forbidden",
                "config_write_requires_any_tenant_key")),
    409: codes(("config_version_conflict", "config_document_limit")),
    503: codes(("store_unavailable",)),
}
WRITE_ERRORS = (400, 409, *AUTHENTICATED)


def _write(method: str, operation_id: str, summary: str) -> Operation:
    return Operation(method, PATH, operation_id, summary, TAG, None, ok_status=204,
                     body=models.ConfigWrite, errors=WRITE_ERRORS, notes=WRITE_NOTES)


PART = ApiPart(
    operations=(
        Operation("get", PATH, "getConfig",
                  "A config document: its data, or the whole document with envelope=true",
                  TAG, dict, query=("scope", "scope_id", "envelope"),
                  errors=(400, 404, *AUTHENTICATED),
                  notes={400: codes(("config_request_invalid",)), 403: READ_403,
                         404: codes(("config_not_found",))}),
        Operation("get", PATH + "/effective", "getEffectiveConfig",
                  "The merged config of system/default, the org, team, workflow and step",
                  TAG, s.EffectiveConfig, query=("org_id", "team_id", "workflow_id", "step_id"),
                  errors=(400, *AUTHENTICATED),
                  notes={400: codes(("config_request_invalid",)), 403: READ_403}),
        _write("put", "replaceConfig", "Set members of a config document (admin)"),
        _write("post", "setConfig", "Set members of a config document (admin)"),
    ),
    tags=((TAG, "Config documents per scope (system, org, team, workflow, step) and the "
                "effective config merged from them, which the safety kernel applies."),),
)
