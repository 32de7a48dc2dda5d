/** Whether a bundle is in force, in words and a shape (never colour alone). */
export function StateBadge({ enabled }: { enabled: boolean | undefined }) {
  return enabled ? (
    <span className="badge badge-success">
      <span className="badge-glyph" aria-hidden="true">
        ✓
      </span>
      <span>in force</span>
    </span>
  ) : (
    <span className="badge badge-neutral">
      <span className="badge-glyph" aria-hidden="true">
        ○
      </span>
      <span>draft</span>
    </span>
  );
}
