import { JsonView } from '@/components';

import { outputView } from '../output';
import type { JobDetail } from '../types';

function because(reason: string) {
  return reason ? ` Reason: ${reason}` : '';
}

/** The job's result, or in words why it is not shown. */
export function JobOutput({ job }: { job: JobDetail }) {
  const view = outputView(job);
  switch (view.kind) {
    case 'quarantined':
      return (
        <p className="notice notice-danger">
          Output quarantined: the output policy withheld this job&apos;s output, so it is not shown.
          {because(view.reason)}
        </p>
      );
    case 'redacted':
      return (
        <p className="notice notice-warning">
          Output redacted: the output policy redacted this job&apos;s output, so it is not shown here.
          {because(view.reason)}
        </p>
      );
    case 'too_large':
      return (
        <p className="notice">
          The result is too large to show here
          {view.bytes !== undefined ? ` (${view.bytes.toLocaleString()} bytes)` : ''}.
          {view.pointer ? ` It is stored at ${view.pointer}.` : ''}
        </p>
      );
    case 'not_succeeded':
      return <p className="muted">No output: the job is {view.state || 'not finished'}.</p>;
    case 'unavailable':
      return <p className="muted">No output is available for this job yet.</p>;
    case 'shown':
      return <JsonView value={view.value} label="Result" />;
  }
}
