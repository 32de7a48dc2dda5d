import { Link } from 'react-router';

import { approvalsAwaited } from '../status';
import type { RunDetail } from '../types';

/** Says plainly which steps wait for a human, and where to decide. */
export function ApprovalNotice({ run }: { run: RunDetail }) {
  const waiting = approvalsAwaited(run);
  if (waiting.length === 0) return null;
  return (
    <section className="runs-approval" aria-labelledby="runs-approval-heading">
      <h2 id="runs-approval-heading">Waiting for approval</h2>
      <ul>
        {waiting.map(({ path, jobId }) => (
          <li key={path}>
            Step <span className="runs-mono">{path}</span> is waiting for approval
            {jobId && (
              <>
                {' '}
                (gate job <span className="runs-mono">{jobId}</span>)
              </>
            )}
            .
          </li>
        ))}
      </ul>
      <p>
        <Link to="/approvals">Review pending approvals</Link>
      </p>
    </section>
  );
}
