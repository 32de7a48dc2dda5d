import { EmptyState, ErrorState, formatTime, Loading, StatusBadge } from '@/components';

import { useRunTimeline } from '../api';
import { eventKey, eventTime, eventWords } from '../timeline';

/** The run's events, oldest first, as a table. */
export function RunTimeline({ runId }: { runId: string }) {
  const timeline = useRunTimeline(runId);
  if (timeline.isPending) return <Loading />;
  if (timeline.isError) {
    return <ErrorState error={timeline.error} retry={() => void timeline.refetch()} />;
  }
  if (timeline.data.length === 0) {
    return <EmptyState title="No events yet" />;
  }
  return (
    <div className="runs-table-wrap">
      <table className="runs-table">
        <caption className="visually-hidden">Run timeline, oldest first</caption>
        <thead>
          <tr>
            <th scope="col">Time</th>
            <th scope="col">Event</th>
            <th scope="col">Step</th>
            <th scope="col">Status</th>
            <th scope="col">Message</th>
          </tr>
        </thead>
        <tbody>
          {timeline.data.map((event, i) => (
            <tr key={eventKey(event, i)}>
              <td>
                <time dateTime={eventTime(event)}>{formatTime(eventTime(event))}</time>
              </td>
              <td>{eventWords(event.type)}</td>
              <td className="runs-mono">{event.step_id ?? ''}</td>
              <td>
                {event.status ? <StatusBadge status={event.status} /> : null}
              </td>
              <td>{event.message ?? ''}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
