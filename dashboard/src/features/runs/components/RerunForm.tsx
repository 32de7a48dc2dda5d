import { useId, useState, type FormEvent } from 'react';
import { useNavigate } from 'react-router';

import { useRerunRun } from '../api';

import { MutationError } from './MutationError';

export type RerunFormProps = {
  runId: string;
  /** The steps one may rerun from, in the definition's order. */
  stepIds: string[];
  dryRun: boolean;
};

const WHOLE_RUN = '';

/**
 * A new run of the same definition and input, from a chosen step (its succeeded
 * dependencies are kept), or from the start.
 */
export function RerunForm({ runId, stepIds, dryRun }: RerunFormProps) {
  const id = useId();
  const navigate = useNavigate();
  const rerun = useRerunRun(runId);
  const [fromStep, setFromStep] = useState(WHOLE_RUN);
  const [asDryRun, setAsDryRun] = useState(dryRun);

  const submit = (e: FormEvent) => {
    e.preventDefault();
    rerun.mutate(
      { fromStep, dryRun: asDryRun },
      {
        onSuccess: (newRunId) => {
          if (newRunId) void navigate(`/runs/${encodeURIComponent(newRunId)}`);
        },
      },
    );
  };

  return (
    <form className="runs-rerun" onSubmit={submit} aria-labelledby={`${id}-heading`}>
      <h2 id={`${id}-heading`}>Rerun</h2>
      <div className="runs-field">
        <label htmlFor={`${id}-step`}>Rerun from step</label>
        <select id={`${id}-step`} value={fromStep} onChange={(e) => setFromStep(e.target.value)}>
          <option value={WHOLE_RUN}>The whole workflow</option>
          {stepIds.map((stepId) => (
            <option key={stepId} value={stepId}>
              {stepId}
            </option>
          ))}
        </select>
      </div>
      <div className="runs-field runs-field--inline">
        <input
          id={`${id}-dry`}
          type="checkbox"
          checked={asDryRun}
          onChange={(e) => setAsDryRun(e.target.checked)}
        />
        <label htmlFor={`${id}-dry`}>As a dry run (dispatch no jobs)</label>
      </div>
      <p className="runs-hint">
        The steps the chosen step depends on keep their outputs; every other step runs again.
      </p>
      <button type="submit" disabled={rerun.isPending}>
        {rerun.isPending ? 'Rerunning…' : 'Rerun'}
      </button>
      {rerun.isError && <MutationError error={rerun.error} />}
    </form>
  );
}
