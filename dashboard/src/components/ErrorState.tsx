import { describeError } from '@/lib/api';

export type ErrorStateProps = {
  error: unknown;
  /** Shown as a "Try again" button when given. */
  retry?: () => void;
  title?: string;
};

/** A failed read: what went wrong, announced, and a way to try again. */
export function ErrorState({ error, retry, title = 'This could not be loaded' }: ErrorStateProps) {
  return (
    <div className="error-state" role="alert">
      <p className="error-title">{title}</p>
      <p>{describeError(error)}</p>
      {retry && (
        <button type="button" onClick={retry}>
          Try again
        </button>
      )}
    </div>
  );
}
