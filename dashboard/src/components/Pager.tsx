import { useState } from 'react';

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

/** The cursors of the pages after the first, as they were followed: the cursor of the
 * page shown, whether it is the first, and the Pager's props for the next cursor. */
export function useCursorPages() {
  const [cursors, setCursors] = useState<string[]>([]);
  return {
    cursor: cursors[cursors.length - 1] as string | undefined,
    onFirstPage: cursors.length === 0,
    pagerProps: (nextCursor: string | null | undefined): PagerProps => ({
      hasNext: Boolean(nextCursor),
      hasPrevious: cursors.length > 0,
      onNext: () => {
        if (nextCursor) setCursors((c) => [...c, nextCursor]);
      },
      onPrevious: () => setCursors((c) => c.slice(0, -1)),
      onFirst: () => setCursors([]),
    }),
  };
}
