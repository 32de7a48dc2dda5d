import { useId } from 'react';

import { Unavailable } from '@/components';

/** A control the signed-in key may not use: disabled, and saying why. */
export function Refused({ label, reason }: { label: string; reason: string }) {
  const id = useId();
  return (
    <span className="policy-refused">
      <button type="button" disabled aria-describedby={id}>
        {label}
      </button>
      <Unavailable id={id} reason={reason} />
    </span>
  );
}
