"""The output policy service, served by the safety kernel process.

CAP defines no output policy messages, so this service has its own wire format:
gRPC unary calls whose request and response bodies are UTF-8 JSON objects (no
protobuf), on service ``cordum.output.v1.OutputPolicy``:

``/cordum.output.v1.OutputPolicy/CheckMeta``
    request  ``{"job_id", "topic", "tenant", "result_ptr", "content_type",
    "size_bytes": int, "labels": {str: str}}``
    response ``{"decision", "reason", "rule_id", "policy_snapshot"}``

``/cordum.output.v1.OutputPolicy/CheckContent``
    request  the CheckMeta fields plus ``"content"``: the result text, at most
    :data:`MAX_CONTENT_BYTES` UTF-8 bytes
    response the CheckMeta fields plus ``"redacted_content"`` (a string, present
    only when ``decision`` is ``REDACT``)

``/cordum.output.v1.OutputPolicy/CheckResult``
    both checks of one result in one call, as the scheduler makes them one after the
    other: request the CheckContent fields; response ``{"meta": <CheckMeta
    response>, "content": <CheckContent response> | null}``, ``content`` present only
    when ``meta`` decided ``ALLOW`` (a quarantine ends the checks; a redaction is
    materialized by a CheckContent of its own). Both are evaluated on one policy
    snapshot.

``decision`` is one of ``ALLOW``, ``DENY``, ``QUARANTINE``, ``REDACT``. Missing
request fields take their empty value; unknown fields are ignored so either side
can add fields first. A body that is not a JSON object, a field of the wrong type,
or content over the limit is INVALID_ARGUMENT. ``size_bytes`` is the size of the
whole result even when ``content`` holds less of it.

The policy is the kernel's safety.yaml (hot-reloaded by its
:class:`~cordum.safety.policy_file.Policy`); the output sections are parsed once per
snapshot. A reload whose output sections do not parse keeps the last good output
policy in force.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

import grpc

from cordum.config import ConfigError
from cordum.safety.output_policy import (
    OutputEvaluation,
    OutputInput,
    OutputPolicy,
    output_policy_of,
)
from cordum.safety.output_wire import (
    MAX_CONTENT_BYTES,
    SERVICE_NAME,
    InvalidRequest,
    OutputDecision,
    decode,
    encode,
)

if TYPE_CHECKING:
    from cordum.safety.policy import SafetyPolicy

log = logging.getLogger("cordum.safety.output")

class PolicySource(Protocol):
    """Gives the safety policy in force (``cordum.safety.policy_file.Policy`` does)."""

    def refresh(self) -> SafetyPolicy: ...


def output_input(doc: dict[str, Any], *, with_content: bool) -> OutputInput:
    """The policy input of a request body; InvalidRequest on a wrong field type."""
    def text(name: str) -> str:
        value = doc.get(name) or ""
        if not isinstance(value, str):
            raise InvalidRequest(f"{name} must be a string")
        return value

    size = doc.get("size_bytes") or 0
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise InvalidRequest("size_bytes must be a non-negative integer")
    labels = doc.get("labels") or {}
    if not isinstance(labels, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise InvalidRequest("labels must be an object of strings")
    content = None
    if with_content:
        content = text("content")
        if len(content.encode("utf-8", "replace")) > MAX_CONTENT_BYTES:
            raise InvalidRequest(f"content exceeds {MAX_CONTENT_BYTES} bytes")
    return OutputInput(topic=text("topic"), tenant=text("tenant"), job_id=text("job_id"),
                       content_type=text("content_type"), size_bytes=size, labels=labels,
                       content=content)


def response_of(result: OutputEvaluation, *, with_content: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"decision": result.decision.value, "reason": result.reason,
                            "rule_id": result.rule_id,
                            "policy_snapshot": result.policy_snapshot}
    if with_content and result.decision is OutputDecision.REDACT:
        body["redacted_content"] = result.redacted_content or ""
    return body


class OutputPolicyService:
    """Answers CheckMeta / CheckContent from the policy source's current snapshot."""

    def __init__(self, source: PolicySource) -> None:
        self.source = source
        self._lock = threading.Lock()
        # A broken output section at start is a startup error, like the rest of the file.
        self._policy = output_policy_of(source.refresh())
        self._seen = self._policy.snapshot
        """The last snapshot looked at, loaded or not: a broken one is logged once."""

    def current(self) -> OutputPolicy:
        policy = self.source.refresh()
        if policy.snapshot == self._seen:
            return self._policy
        with self._lock:
            if policy.snapshot != self._seen:
                self._seen = policy.snapshot
                try:
                    self._policy = output_policy_of(policy)
                except ConfigError as exc:
                    log.error("output policy reload failed, keeping %s: %s",
                              self._policy.snapshot, exc)
            return self._policy

    def check(self, doc: dict[str, Any], *, with_content: bool) -> dict[str, Any]:
        result = self.current().evaluate(output_input(doc, with_content=with_content))
        return response_of(result, with_content=with_content)

    def check_meta(self, doc: dict[str, Any], context: grpc.ServicerContext) -> dict[str, Any]:
        return self.check(doc, with_content=False)

    def check_content(self, doc: dict[str, Any],
                      context: grpc.ServicerContext) -> dict[str, Any]:
        return self.check(doc, with_content=True)

    def check_result(self, doc: dict[str, Any],
                     context: grpc.ServicerContext) -> dict[str, Any]:
        return self.check_both(doc)

    def check_both(self, doc: dict[str, Any]) -> dict[str, Any]:
        """CheckMeta, then CheckContent when it allowed, on one snapshot."""
        policy = self.current()
        asked = output_input(doc, with_content=True)
        meta = policy.evaluate(replace(asked, content=None))
        body: dict[str, Any] = {"meta": response_of(meta, with_content=False), "content": None}
        if meta.decision is OutputDecision.ALLOW:
            body["content"] = response_of(policy.evaluate(asked), with_content=True)
        return body


def _deserialize(data: bytes) -> dict[str, Any]:
    # A malformed body becomes an empty marker the handler rejects: raising here
    # would surface as INTERNAL rather than INVALID_ARGUMENT.
    try:
        return decode(data)
    except InvalidRequest as exc:
        return {"__invalid__": str(exc)}


def _guarded(handler: Any) -> Any:
    """``handler`` with a request it cannot take answered INVALID_ARGUMENT: a body that
    did not decode, or fields ``output_input`` refuses."""
    def call(doc: dict[str, Any], context: grpc.ServicerContext) -> dict[str, Any]:
        if "__invalid__" in doc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(doc["__invalid__"]))
        try:
            result: dict[str, Any] = handler(doc, context)
        except InvalidRequest as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            raise  # abort raises; this line keeps type checkers informed
        return result
    return call


def add_output_policy_service(server: grpc.Server,
                              policy_source: PolicySource) -> OutputPolicyService:
    """Register the service on ``server`` (before ``server.start()``).

    The server needs ``grpc.max_receive_message_length`` of at least
    :data:`MAX_MESSAGE_BYTES` for full-size content requests (gRPC's default is 4 MiB,
    which is enough).
    """
    service = OutputPolicyService(policy_source)
    handlers = {
        "CheckMeta": grpc.unary_unary_rpc_method_handler(
            _guarded(service.check_meta), request_deserializer=_deserialize,
            response_serializer=encode),
        "CheckContent": grpc.unary_unary_rpc_method_handler(
            _guarded(service.check_content), request_deserializer=_deserialize,
            response_serializer=encode),
        "CheckResult": grpc.unary_unary_rpc_method_handler(
            _guarded(service.check_result), request_deserializer=_deserialize,
            response_serializer=encode),
    }
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    return service
