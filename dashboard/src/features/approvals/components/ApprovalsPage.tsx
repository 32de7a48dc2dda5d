import { useState } from 'react';

import { EmptyState, ErrorState, Loading, Page, Pager } from '@/components';

import { useApprovals, type Decision } from '../api';
import '../approvals.css';
import { ApprovalCard } from './ApprovalCard';

/** The jobs waiting for a human decision. */
export function ApprovalsPage() {
  const [cursors, setCursors] = useState<string[]>([]);
  const [done, setDone] = useState('');
  const approvals = useApprovals(cursors[cursors.length - 1]);

  function decided(jobId: string, decision: Decision) {
    setDone(`${decision === 'approve' ? 'Approved' : 'Rejected'} job ${jobId}.`);
  }

  let body;
  if (approvals.isPending) body = <Loading label="Loading approvals…" />;
  else if (approvals.isError) body = <ErrorState error={approvals.error} retry={() => void approvals.refetch()} />;
  else if (approvals.data.items.length === 0 && cursors.length === 0) {
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
        <Pager
          hasNext={Boolean(nextCursor)}
          hasPrevious={cursors.length > 0}
          onNext={() => setCursors((c) => [...c, nextCursor])}
          onPrevious={() => setCursors((c) => c.slice(0, -1))}
          onFirst={() => setCursors([])}
        />
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
