export type PagerProps = {
  hasNext: boolean;
  onNext: () => void;
  /** Whether a page before this one was seen. */
  hasPrevious?: boolean;
  /** Back one page; a "Previous page" button when given. */
  onPrevious?: () => void;
  /** Back to the start; a "First page" button when given. */
  onFirst?: () => void;
};

/** Cursor paging: forward with the server's cursor, back to pages already seen. */
export function Pager({ hasNext, onNext, hasPrevious = false, onPrevious, onFirst }: PagerProps) {
  if (!hasNext && !hasPrevious) return null;
  return (
    <nav className="pager" aria-label="Pages">
      {onFirst && (
        <button type="button" onClick={onFirst} disabled={!hasPrevious}>
          First page
        </button>
      )}
      {onPrevious && (
        <button type="button" onClick={onPrevious} disabled={!hasPrevious}>
          Previous page
        </button>
      )}
      <button type="button" onClick={onNext} disabled={!hasNext}>
        Next page
      </button>
    </nav>
  );
}
