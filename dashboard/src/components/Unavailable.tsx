import type { ReactNode } from 'react';

export type UnavailableProps = {
  /** Why the act cannot be taken; nothing is shown when empty. */
  reason: string;
  /** The id the disabled control names in `aria-describedby`. */
  id: string;
  children?: ReactNode;
};

/**
 * The reason an act is unavailable to the signed-in key, shown beside its disabled
 * control (which names this text with `aria-describedby={id}`).
 */
export function Unavailable({ reason, id, children }: UnavailableProps) {
  if (!reason) return null;
  return (
    <p className="unavailable" id={id}>
      <strong aria-hidden="true">Unavailable: </strong>
      <span>{reason}</span>
      {children}
    </p>
  );
}
