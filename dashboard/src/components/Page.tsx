import { useEffect, type ReactNode } from 'react';

export const PRODUCT_NAME = 'Cordum';

export type PageProps = {
  title: string;
  /** Buttons or links beside the heading. */
  actions?: ReactNode;
  children?: ReactNode;
};

/** A page: its one <h1>, the tab's title, and its content. */
export function Page({ title, actions, children }: PageProps) {
  useEffect(() => {
    document.title = `${title} · ${PRODUCT_NAME}`;
  }, [title]);
  return (
    <div className="page">
      <div className="page-head">
        <h1>{title}</h1>
        {actions && <div className="page-actions">{actions}</div>}
      </div>
      {children}
    </div>
  );
}
