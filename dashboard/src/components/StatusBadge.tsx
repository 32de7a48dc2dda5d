import { TONE_GLYPHS, toneOf } from './status';

/** A status word with a shape and a colour that match it; the word is always shown. */
export function StatusBadge({ status }: { status: string }) {
  const tone = toneOf(status);
  return (
    <span className={`badge badge-${tone}`} data-tone={tone}>
      <span className="badge-glyph" aria-hidden="true">
        {TONE_GLYPHS[tone]}
      </span>
      <span>{status || 'unknown'}</span>
    </span>
  );
}
