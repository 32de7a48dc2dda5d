import '../runs.css';

import { useQueryClient } from '@tanstack/react-query';
import { lazy, Suspense, useEffect, useRef } from 'react';
import { useParams } from 'react-router';

import { ConfirmButton, ErrorState, JsonView, Loading, Page } from '@/components';

import { runKeys, useCancelRun, useRun, useRunDefinition } from '../api';
import { isTerminal } from '../status';
import type { Definition, RunDetail } from '../types';

import { ApprovalNotice } from './ApprovalNotice';
import { MutationError } from './MutationError';
import { RerunForm } from './RerunForm';
import { RunSummary } from './RunSummary';
import { RunTimeline } from './RunTimeline';
import { StepChildren } from './StepChildren';

// React Flow is the heaviest thing on the page: the run list never loads it.
const RunGraph = lazy(() => import('./RunGraph'));

function CancelRun({ runId, workflowId }: { runId: string; workflowId: string }) {
  const cancel = useCancelRun({ id: runId, workflowId });
  return (
    <div className="runs-actions">
      <ConfirmButton
        onConfirm={() => cancel.mutate()}
        disabled={cancel.isPending}
        question="Cancel this run? Its open jobs and child runs are cancelled too."
        confirmLabel="Yes, cancel run"
      >
        Cancel run
      </ConfirmButton>
      {cancel.isError && <MutationError error={cancel.error} />}
    </div>
  );
}

/**
 * The timeline follows the run: each new version of the run (a poll or a live event)
 * fetches it again. A fetch already under way is left to finish rather than restarted.
 */
function useTimelineFollowsRun(runId: string, version: string | undefined) {
  const queryClient = useQueryClient();
  const seen = useRef<string | undefined>(undefined);
  useEffect(() => {
    if (version === undefined) return;
    if (seen.current !== undefined && seen.current !== version) {
      void queryClient.invalidateQueries({ queryKey: runKeys.timeline(runId) }, { cancelRefetch: false });
    }
    seen.current = version;
  }, [queryClient, runId, version]);
}

function stepIdsOf(run: RunDetail, definition: Definition | undefined): string[] {
  const ids = Object.keys(definition?.steps ?? {});
  for (const id of Object.keys(run.steps ?? {})) if (!ids.includes(id)) ids.push(id);
  return ids;
}

function RunBody({ runId, run }: { runId: string; run: RunDetail }) {
  const definition = useRunDefinition(run.workflow_id);
  const hasChildren = Object.values(run.steps ?? {}).some(
    (s) => s.children || Array.isArray(s.resolved_items),
  );
  return (
    <>
      <RunSummary run={run} />
      <ApprovalNotice run={run} />

      <section className="runs-section" aria-labelledby="run-graph-heading">
        <h2 id="run-graph-heading">Graph</h2>
        {definition.isPending && definition.fetchStatus !== 'idle' ? (
          <Loading />
        ) : (
          <>
            {definition.isError && (
              <p className="runs-muted">
                The workflow definition could not be loaded, so the steps are shown without their
                links.
              </p>
            )}
            <Suspense fallback={<Loading />}>
              <RunGraph definition={definition.data} run={run} />
            </Suspense>
          </>
        )}
      </section>

      {hasChildren && (
        <section className="runs-section" aria-labelledby="run-children-heading">
          <h2 id="run-children-heading">Items and iterations</h2>
          <StepChildren run={run} definition={definition.data} />
        </section>
      )}

      <section className="runs-section">
        <RerunForm runId={runId} stepIds={stepIdsOf(run, definition.data)} dryRun={Boolean(run.dry_run)} />
      </section>

      <section className="runs-section" aria-labelledby="run-timeline-heading">
        <h2 id="run-timeline-heading">Timeline</h2>
        <RunTimeline runId={runId} />
      </section>

      <section className="runs-section runs-columns">
        <div>
          <h2>Input</h2>
          <JsonView value={run.input ?? {}} />
        </div>
        <div>
          <h2>Output</h2>
          {run.output === undefined || run.output === null ? (
            <p className="runs-muted">No output yet.</p>
          ) : (
            <JsonView value={run.output} />
          )}
        </div>
      </section>
    </>
  );
}

export function RunDetailPage() {
  const { id = '' } = useParams();
  const run = useRun(id);
  useTimelineFollowsRun(id, run.data?.updated_at);
  const title = `Run ${id}`;

  if (run.isPending) {
    return (
      <Page title={title}>
        <Loading />
      </Page>
    );
  }
  if (run.isError) {
    return (
      <Page title={title}>
        <ErrorState error={run.error} retry={() => void run.refetch()} />
      </Page>
    );
  }
  const actions = isTerminal(run.data.status) ? undefined : (
    <CancelRun runId={id} workflowId={run.data.workflow_id ?? ''} />
  );
  return (
    <Page title={title} actions={actions}>
      <RunBody runId={id} run={run.data} />
    </Page>
  );
}
