import { describeError } from '@/lib/api';

/** A failed request's reason, announced where the request was made. */
export function RequestError({ error }: { error: unknown }) {
  return (
    <p className="wf-error" role="alert">
      {describeError(error)}
    </p>
  );
}
