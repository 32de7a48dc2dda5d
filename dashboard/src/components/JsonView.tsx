export type JsonViewProps = {
  value: unknown;
  /** What the value is, shown above it. */
  label?: string;
};

export function formatJson(value: unknown): string {
  if (value === undefined) return '';
  if (typeof value === 'string') return value;
  try {
    return JSON.stringify(value, null, 2) ?? String(value);
  } catch {
    return String(value);
  }
}

/** A value as pretty-printed JSON (wrapped, never a scrolling box). */
export function JsonView({ value, label }: JsonViewProps) {
  const text = <pre className="json-text">{formatJson(value)}</pre>;
  if (!label) return <div className="json-view">{text}</div>;
  return (
    <figure className="json-view">
      <figcaption className="json-label">{label}</figcaption>
      {text}
    </figure>
  );
}
