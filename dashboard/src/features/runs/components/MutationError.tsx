import { describeError } from '@/lib/api';

/** A failed action's reason, announced where the action is. */
export function MutationError({ error }: { error: unknown }) {
  return (
    <p className="runs-error" role="alert">
      {describeError(error)}
    </p>
  );
}
