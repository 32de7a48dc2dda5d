import { useId, type ReactNode } from 'react';

import { Unavailable } from '@/components';
import type { Verdict } from '@/lib/capabilities';

export type SubmitRowProps = {
  /** The button's text, and its text while the request is under way. */
  label: string;
  busyLabel: string;
  busy: boolean;
  /** Whether the signed-in key may submit the form, and why not. */
  verdict: Verdict;
  /** What went wrong, each shown as an alert (empty strings are skipped). */
  problems: string[];
  /** Shown as a status once the request succeeded. */
  done?: ReactNode;
};

/** A data form's submit button, the reason it is unavailable, its problems and its outcome. */
export function SubmitRow({ label, busyLabel, busy, verdict, problems, done }: SubmitRowProps) {
  const whyId = useId();
  return (
    <>
      <div>
        <button type="submit" disabled={!verdict.allowed || busy} aria-describedby={verdict.allowed ? undefined : whyId}>
          {busy ? busyLabel : label}
        </button>
      </div>
      <Unavailable id={whyId} reason={verdict.allowed ? '' : verdict.reason} />
      {problems
        .filter(Boolean)
        .map((problem) => (
          <p key={problem} className="form-error" role="alert">
            {problem}
          </p>
        ))}
      {done && <p role="status">{done}</p>}
    </>
  );
}
