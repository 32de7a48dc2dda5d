import { useId, useState, type FormEvent } from 'react';

import { EmptyState, ErrorState, Loading, Page, Unavailable } from '@/components';
import { useCapabilities } from '@/lib/capabilities';

import {
  addPage,
  emptyRun,
  lastHours,
  replayBody,
  useReplay,
  windowProblem,
  type ReplayForm,
  type ReplayRun,
} from '../api';
import '../govern.css';
import { CandidatePicker } from './CandidatePicker';
import { ReplayResults } from './ReplayResults';
import { WindowFields } from './WindowFields';

const DECISIONS = ['ALLOW', 'ALLOW_WITH_CONSTRAINTS', 'REQUIRE_APPROVAL', 'THROTTLE', 'DENY'];

function initialForm(): ReplayForm {
  return { ...lastHours(24), candidate: { kind: 'bundle', bundleId: '' }, topicPattern: '', originalDecision: '' };
}

function formProblem(form: ReplayForm): string {
  if (form.candidate.kind === 'bundle' && !form.candidate.bundleId) return 'Choose a draft bundle to replay.';
  if (form.candidate.kind === 'content' && !form.candidate.content.trim()) return 'Paste the bundle content to replay.';
  return windowProblem(form);
}

/** The tenant's recorded jobs decided again under a draft policy: what would change. */
export function ReplayPage() {
  const { can } = useCapabilities();
  const simulate = can('policy.simulate');
  const reasonId = useId();
  const decisionId = useId();
  const [form, setForm] = useState<ReplayForm>(initialForm);
  const [problem, setProblem] = useState('');
  // The form of the run shown: "read further" goes on with the same body.
  const [ran, setRan] = useState<ReplayForm | null>(null);
  const [run, setRun] = useState<ReplayRun | null>(null);
  const [page, setPage] = useState(0);
  const replay = useReplay();

  function start(event: FormEvent) {
    event.preventDefault();
    if (!simulate.allowed) return;
    const why = formProblem(form);
    setProblem(why);
    if (why) return;
    setRan(form);
    setRun(null);
    setPage(0);
    replay.mutate(replayBody(form), { onSuccess: (answer) => setRun(addPage(emptyRun(), answer)) });
  }

  function readFurther() {
    if (!ran || !run?.nextCursor) return;
    const before = run;
    replay.mutate(replayBody(ran, run.nextCursor), { onSuccess: (answer) => setRun(addPage(before, answer)) });
  }

  let results;
  if (replay.isPending && !run) results = <Loading label="Replaying the window…" />;
  else if (replay.isError && !run) {
    results = <ErrorState title="The replay failed" error={replay.error} />;
  } else if (run) {
    results = (
      <ReplayResults
        run={run}
        page={page}
        onPage={setPage}
        onReadFurther={readFurther}
        reading={replay.isPending}
        furtherError={replay.isError ? replay.error : null}
      />
    );
  } else {
    results = (
      <EmptyState
        title="Nothing replayed yet"
        description="Choose a candidate and a window, then run the replay to see which decisions it would change."
      />
    );
  }

  return (
    <Page title="Policy replay">
      <p className="govern-muted">
        Decides the tenant&apos;s recorded jobs again under a candidate policy (the policy in force with a draft bundle
        put in force) and lists the jobs whose decision would change. Nothing is stored or published.
      </p>
      <form className="govern-form card" onSubmit={start} noValidate aria-label="Replay">
        <CandidatePicker
          candidate={form.candidate}
          onChange={(candidate) => setForm((f) => ({ ...f, candidate }))}
        />
        <WindowFields
          value={form}
          onChange={(w) => setForm((f) => ({ ...f, ...w }))}
          hint="Jobs are chosen by their last state change; the window may span at most 7 days."
        />
        <fieldset className="govern-fieldset">
          <legend>Filters (optional)</legend>
          <div className="filters">
            <label className="field">
              Topic pattern
              <input
                type="text"
                value={form.topicPattern}
                placeholder="job.payments.*"
                onChange={(e) => setForm((f) => ({ ...f, topicPattern: e.target.value }))}
              />
            </label>
            <div className="field">
              <label htmlFor={decisionId}>Recorded decision</label>
              <select
                id={decisionId}
                value={form.originalDecision}
                onChange={(e) => setForm((f) => ({ ...f, originalDecision: e.target.value }))}
              >
                <option value="">Any</option>
                {DECISIONS.map((d) => (
                  <option key={d} value={d}>
                    {d}
                  </option>
                ))}
              </select>
            </div>
          </div>
        </fieldset>
        {problem && (
          <p className="form-error" role="alert">
            {problem}
          </p>
        )}
        <div className="row-actions">
          <button
            type="submit"
            className="button-primary"
            disabled={!simulate.allowed || replay.isPending}
            aria-describedby={simulate.allowed ? undefined : reasonId}
          >
            Run replay
          </button>
        </div>
        <Unavailable id={reasonId} reason={simulate.reason} />
      </form>
      <div aria-live="polite">{results}</div>
    </Page>
  );
}
