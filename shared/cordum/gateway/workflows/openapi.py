"""The workflow operations of the gateway's OpenAPI document: the definitions and runs
cordum-sdk calls (``/api/v1/workflows``, ``/api/v1/workflow-runs``), under their two tags.
The operation ids are cordum-sdk's (``dryRunWorkflow``, ``rerunWorkflow``)."""

from __future__ import annotations

from cordum.gateway.core.openapi import AUTHENTICATED, ApiPart, Operation, codes
from cordum.gateway.workflows import schemas as wf_schemas

WF, RUNS = "Workflows", "Workflow runs"
WORKFLOW_ERRORS = (400, 404, *AUTHENTICATED)
RUN_FILTERS = ("status", "workflow_id", "updated_after", "updated_before")
WORKFLOW_OPERATIONS: tuple[Operation, ...] = (
    Operation("get", "/api/v1/workflows", "listWorkflows", "The tenant's workflow definitions",
              WF, list[wf_schemas.WorkflowDefinition], query=("Limit",),
              errors=(400, *AUTHENTICATED)),
    Operation("post", "/api/v1/workflows", "createWorkflow", "Save a definition (an upsert)",
              WF, wf_schemas.CreateWorkflowResponse, ok_status=201,
              body=wf_schemas.SaveWorkflowRequest, errors=(400, 413, *AUTHENTICATED),
              notes={400: codes(("invalid_json", "invalid_request"))}),
    Operation("get", "/api/v1/workflows/{id}", "getWorkflow", "Get a definition", WF,
              wf_schemas.WorkflowDefinition, errors=WORKFLOW_ERRORS),
    Operation("delete", "/api/v1/workflows/{id}", "deleteWorkflow", "Delete a definition", WF,
              None, ok_status=204, errors=WORKFLOW_ERRORS),
    Operation("post", "/api/v1/workflows/{id}/runs", "startWorkflowRun",
              "Start a run; the body is its input (Idempotency-Key or X-Idempotency-Key)",
              WF, wf_schemas.StartWorkflowRunResponse, body=wf_schemas.WorkflowRunInput,
              idempotency=True, query=("dry_run",),
              errors=(400, 404, 409, 413, *AUTHENTICATED),
              notes={400: codes(("invalid_input",)),
                     409: codes(("RUN_IDEMPOTENCY_CONFLICT",)),
                     429: codes(("RUN_NOT_RUNNABLE",))}),
    Operation("post", "/api/v1/workflows/{id}/dry-run", "dryRunWorkflow",
              "Each step's policy decision, asked of the safety kernel without making a job",
              WF, wf_schemas.WorkflowDryRunResponse, body=wf_schemas.WorkflowDryRunRequest,
              errors=(400, 404, 413, *AUTHENTICATED),
              notes={400: codes(("invalid_request", "invalid_json"))}),
    Operation("get", "/api/v1/workflows/{id}/runs", "listWorkflowRuns",
              "A definition's runs, newest first", WF, list[wf_schemas.RunSummary],
              query=("Limit",), errors=WORKFLOW_ERRORS),
    Operation("post", "/api/v1/workflows/{id}/runs/{run_id}/cancel", "cancelWorkflowRun",
              "Cancel a run", RUNS, None, ok_status=204, errors=(*WORKFLOW_ERRORS, 409),
              notes={409: codes(("RUN_NOT_CANCELLABLE",))}),
    Operation("get", "/api/v1/workflow-runs", "listAllWorkflowRuns",
              "The tenant's runs, newest first", RUNS, wf_schemas.RunList,
              query=("Limit", "Cursor", *RUN_FILTERS), errors=(400, *AUTHENTICATED)),
    Operation("get", "/api/v1/workflow-runs/{id}", "getWorkflowRun",
              "Get a run and its pending timers", RUNS, wf_schemas.RunDetail,
              errors=WORKFLOW_ERRORS),
    Operation("delete", "/api/v1/workflow-runs/{id}", "deleteWorkflowRun",
              "Delete a run (an open run is cancelled first)", RUNS, None, ok_status=204,
              errors=(*WORKFLOW_ERRORS, 409), notes={409: codes(("RUN_NOT_CANCELLABLE",))}),
    Operation("post", "/api/v1/workflow-runs/{id}/rerun", "rerunWorkflow",
              "Rerun a run (from a step: its succeeded dependencies are kept)", RUNS,
              wf_schemas.RerunWorkflowResponse, body=wf_schemas.RerunWorkflowRequest,
              errors=(400, 404, 413, *AUTHENTICATED),
              notes={400: codes(("RUN_NOT_RUNNABLE", "invalid_request", "invalid_json")),
                     429: codes(("RUN_NOT_RUNNABLE",))}),
    Operation("get", "/api/v1/workflow-runs/{id}/timeline", "getRunTimeline",
              "A run's events, oldest first", RUNS, list[wf_schemas.TimelineEvent],
              errors=WORKFLOW_ERRORS),
)

PART = ApiPart(WORKFLOW_OPERATIONS, tags=((WF, "Workflow definitions and starting runs."),
                                          (RUNS, "Workflow runs: read, cancel, delete.")))
