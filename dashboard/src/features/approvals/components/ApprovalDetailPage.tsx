import { useCallback, useState } from 'react';
import { Link, useParams } from 'react-router';

import { ErrorState, formatTime, Loading, Page, StatusBadge } from '@/components';
import { useCapabilities } from '@/lib/capabilities';

import {
  decidable,
  SELF_APPROVAL_TEXT,
  useApprovalContext,
  useApprovalItem,
  type ApprovalContext,
  type ApprovalItem,
} from '../api';
import '../approvals.css';
import { microsToIso } from '../countdown';
import { BlastRadius, PriorDecisions, Risk, RollbackGuidance, Section, WhatWillRun, WhyGated } from './ContextSections';
import { Countdown } from './Countdown';
import { DecisionForm } from './DecisionForm';

/** When the approval expires (ms since the epoch), from the context as it was received. */
function deadlineOf(context: ApprovalContext, receivedAt: number): number | null {
  const remaining = context.time_left?.remaining_ms ?? context.time_remaining_ms;
  // The time left is counted from when the answer arrived, so the browser's clock
  // need not agree with the gateway's; the absolute time is the fallback.
  if (remaining !== null && remaining !== undefined) return receivedAt + remaining;
  const at = context.time_left?.expires_at;
  if (at) {
    const parsed = Date.parse(at);
    if (!Number.isNaN(parsed)) return parsed;
  }
  return null;
}

/** Why the signed-in key cannot decide now ('' when it can). */
function blockedBecause({
  context,
  item,
  principal,
  expired,
  capability,
}: {
  context: ApprovalContext;
  item: ApprovalItem | null | undefined;
  principal: string | undefined;
  expired: boolean;
  capability: { allowed: boolean; reason: string };
}): string {
  if (!capability.allowed) return capability.reason;
  const approval = context.approval ?? {};
  const status = approval.approval_status;
  if (status === 'approved' || status === 'rejected') {
    const by = approval.resolved_by ? ` by ${approval.resolved_by}` : '';
    const when = approval.resolved_at ? ` on ${formatTime(microsToIso(approval.resolved_at))}` : '';
    return `This approval was already ${status}${by}${when}.`;
  }
  if (status === 'expired' || expired) return 'This approval has expired: it can no longer be approved or rejected.';
  if (status !== 'pending' && !item) return 'This job is not waiting for an approval.';
  if (item) {
    const { may, why } = decidable(item);
    if (!may) return why;
  } else if (principal && context.what_will_run?.principal === principal) {
    return SELF_APPROVAL_TEXT;
  }
  return '';
}

function TimeLeft({ deadline, onExpire }: { deadline: number | null; onExpire: () => void }) {
  return (
    <Section title="Time left">
      {deadline === null ? (
        <p className="muted">This approval has no deadline: it waits until someone decides.</p>
      ) : (
        <Countdown deadline={deadline} onExpire={onExpire} />
      )}
    </Section>
  );
}

function Summary({ context, jobId }: { context: ApprovalContext; jobId: string }) {
  const summary = context.decision_summary ?? {};
  const approval = context.approval ?? {};
  const status = approval.approval_status;
  return (
    <div className="approval-summary">
      {summary.title && <p className="approval-summary-title">{summary.title}</p>}
      {summary.subject && <p>{summary.subject}</p>}
      <dl className="facts">
        <div className="facts-row">
          <dt>Job</dt>
          <dd>
            <Link to={`/jobs/${encodeURIComponent(jobId)}`}>{jobId}</Link>
          </dd>
        </div>
        <div className="facts-row">
          <dt>Approval</dt>
          <dd>
            <StatusBadge status={status ?? 'not gated'} />
          </dd>
        </div>
        {approval.state && (
          <div className="facts-row">
            <dt>Job state</dt>
            <dd>
              <StatusBadge status={approval.state} />
            </dd>
          </div>
        )}
        {approval.resolution && (
          <div className="facts-row">
            <dt>Decision reason</dt>
            <dd>{approval.resolution}</dd>
          </div>
        )}
      </dl>
    </div>
  );
}

/** One approval in full: everything its context says, the time left, and the decision. */
export function ApprovalDetailPage() {
  const jobId = useParams().id ?? '';
  const context = useApprovalContext(jobId, Boolean(jobId));
  const item = useApprovalItem(jobId);
  const { can, me } = useCapabilities();
  const [expired, setExpired] = useState(false);
  const [done, setDone] = useState('');
  const onExpire = useCallback(() => setExpired(true), []);

  const title = `Approval for job ${jobId}`;
  const actions = <Link to="/approvals">All approvals</Link>;
  const notice = (
    <p role="status" className={done ? 'notice' : 'visually-hidden'}>
      {done}
    </p>
  );

  if (context.isPending) {
    return (
      <Page title={title} actions={actions}>
        <Loading label="Loading the approval…" />
      </Page>
    );
  }
  if (context.isError) {
    return (
      <Page title={title} actions={actions}>
        <ErrorState error={context.error} retry={() => void context.refetch()} />
      </Page>
    );
  }

  const doc = context.data;
  const deadline = deadlineOf(doc, context.dataUpdatedAt);
  const blocked = item.isPending
    ? 'Checking whether this key may decide…'
    : blockedBecause({
        context: doc,
        item: item.data,
        principal: me?.principal_id,
        expired,
        capability: can('approvals.decide'),
      });

  return (
    <Page title={title} actions={actions}>
      {notice}
      <Summary context={doc} jobId={jobId} />
      <div className="context-sections">
        <TimeLeft key={deadline ?? 'none'} deadline={deadline} onExpire={onExpire} />
        <WhatWillRun context={doc} />
        <WhyGated context={doc} />
        <BlastRadius context={doc} />
        <Risk context={doc} />
        <PriorDecisions context={doc} />
        <RollbackGuidance context={doc} />
        <Section title="Decision">
          <DecisionForm
            jobId={jobId}
            blocked={blocked}
            onDecided={(decision) => setDone(`${decision === 'approve' ? 'Approved' : 'Rejected'} job ${jobId}.`)}
          />
        </Section>
      </div>
    </Page>
  );
}
