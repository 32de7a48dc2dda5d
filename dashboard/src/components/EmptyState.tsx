import type { ReactNode } from 'react';

export type EmptyStateProps = {
  title: string;
  description?: ReactNode;
  children?: ReactNode;
};

/** What a page shows when there is nothing to list. */
export function EmptyState({ title, description, children }: EmptyStateProps) {
  return (
    <div className="empty-state">
      <p className="empty-title">{title}</p>
      {description && <p className="muted">{description}</p>}
      {children}
    </div>
  );
}
