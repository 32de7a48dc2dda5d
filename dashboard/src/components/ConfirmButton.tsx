import { useEffect, useId, useRef, useState, type ReactNode } from 'react';

export type ConfirmButtonProps = {
  /** The button's text, e.g. "Cancel job". */
  children: ReactNode;
  onConfirm: () => void;
  /** The question asked; default "Are you sure?". */
  question?: ReactNode;
  /** The confirming button's text; default "Yes, <children>" for a text child. */
  confirmLabel?: string;
  /** The button that backs out. */
  dismissLabel?: string;
  disabled?: boolean;
  /** Styles the buttons as destructive. */
  danger?: boolean;
};

/**
 * A button that asks before it acts: a small dialog next to it, focused on its
 * confirming button; Escape or "No, go back" closes it and returns focus.
 */
export function ConfirmButton({
  children,
  onConfirm,
  question = 'Are you sure?',
  confirmLabel,
  dismissLabel = 'No, go back',
  disabled = false,
  danger = true,
}: ConfirmButtonProps) {
  const [open, setOpen] = useState(false);
  const trigger = useRef<HTMLButtonElement>(null);
  const confirm = useRef<HTMLButtonElement>(null);
  const questionId = useId();
  const label = confirmLabel ?? (typeof children === 'string' ? `Yes, ${children.toLowerCase()}` : 'Yes');

  useEffect(() => {
    if (!open) return undefined;
    confirm.current?.focus();
    function onKey(event: KeyboardEvent) {
      if (event.key !== 'Escape') return;
      event.preventDefault();
      setOpen(false);
      trigger.current?.focus();
    }
    document.addEventListener('keydown', onKey);
    return () => document.removeEventListener('keydown', onKey);
  }, [open]);

  function close() {
    setOpen(false);
    trigger.current?.focus();
  }

  const tone = danger ? 'button-danger' : undefined;
  return (
    <span className="confirm">
      <button
        ref={trigger}
        type="button"
        className={tone}
        disabled={disabled}
        aria-haspopup="dialog"
        aria-expanded={open}
        onClick={() => setOpen(true)}
      >
        {children}
      </button>
      {open && (
        <div
          className="confirm-dialog"
          role="alertdialog"
          aria-modal="false"
          aria-labelledby={questionId}
        >
          <p id={questionId}>{question}</p>
          <div className="confirm-buttons">
            <button
              ref={confirm}
              type="button"
              className={tone}
              onClick={() => {
                setOpen(false);
                trigger.current?.focus();
                onConfirm();
              }}
            >
              {label}
            </button>
            <button type="button" onClick={close}>
              {dismissLabel}
            </button>
          </div>
        </div>
      )}
    </span>
  );
}
