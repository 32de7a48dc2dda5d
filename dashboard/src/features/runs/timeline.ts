import type { TimelineEvent } from './types';

/** An event type as words: `step_delay_started` reads "step delay started". */
export function eventWords(type: string | undefined): string {
  return (type ?? 'event').replace(/_/g, ' ');
}

export function eventTime(event: TimelineEvent): string {
  return event.timestamp ?? event.time ?? '';
}

/** A stable React key: events have no id, but time, type and step rarely repeat together. */
export function eventKey(event: TimelineEvent, index: number): string {
  return `${eventTime(event)}|${event.type ?? ''}|${event.step_id ?? ''}|${index}`;
}
