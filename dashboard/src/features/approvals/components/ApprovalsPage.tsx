import { useState } from 'react';

import { EmptyState, ErrorState, Loading, Page, Pager, useCursorPages } from '@/components';

import { useApprovals, type Decision } from '../api';
import '../approvals.css';
import { ApprovalCard } from './ApprovalCard';

/** The jobs waiting for a human decision. */
export function ApprovalsPage() {
  const { cursor, onFirstPage, pagerProps } = useCursorPages();
  const [done, setDone] = useState('');
  const approvals = useApprovals(cursor);

  function decided(jobId: string, decision: Decision) {
    setDone(`${decision === 'approve' ? 'Approved' : 'Rejected'} job ${jobId}.`);
  }

  let body;
  if (approvals.isPending) body = <Loading label="Loading approvals…" />;
  else if (approvals.isError) body = <ErrorState error={approvals.error} retry={() => void approvals.refetch()} />;
  else if (approvals.data.items.length === 0 && onFirstPage) {
    body = <EmptyState title="No approvals waiting" description="Jobs that a policy holds for a human show up here." />;
  } else {
    const { items, nextCursor } = approvals.data;
    body = (
      <>
        <div className="approval-list">
          {items.map((item) => (
            <ApprovalCard key={item.job?.id} item={item} onDecided={decided} />
          ))}
        </div>
        <Pager {...pagerProps(nextCursor)} />
      </>
    );
  }
  return (
    <Page title="Approvals">
      <p role="status" className={done ? 'notice' : 'visually-hidden'}>
        {done}
      </p>
      {body}
    </Page>
  );
}
