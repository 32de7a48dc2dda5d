import { render, screen, within } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { describe, expect, it, vi } from 'vitest';

import { ApiError } from '@/lib/api';

import { ConfirmButton } from './ConfirmButton';
import { ErrorState } from './ErrorState';
import { JsonView } from './JsonView';
import { Page } from './Page';
import { Pager } from './Pager';
import { StatusBadge } from './StatusBadge';
import { toneOf } from './status';

describe('StatusBadge', () => {
  it('shows the word with a shape, never colour alone', () => {
    render(<StatusBadge status="FAILED" />);
    const word = screen.getByText('FAILED');
    const badge = word.parentElement as HTMLElement;
    expect(badge).toHaveAttribute('data-tone', 'danger');
    expect(badge.querySelector('[aria-hidden="true"]')).toHaveTextContent('✕');
  });

  it('gives each family of states its tone', () => {
    expect(toneOf('SUCCEEDED')).toBe('success');
    expect(toneOf('JOB_STATUS_FAILED')).toBe('danger');
    expect(toneOf('OUTPUT_QUARANTINED')).toBe('danger');
    expect(toneOf('APPROVAL_REQUIRED')).toBe('warning');
    expect(toneOf('running')).toBe('active');
    expect(toneOf('half-open')).toBe('warning');
    expect(toneOf('something new')).toBe('neutral');
  });
});

describe('ConfirmButton', () => {
  it('asks in a dialog, focuses the confirming button, and acts only when confirmed', async () => {
    const onConfirm = vi.fn();
    render(
      <ConfirmButton onConfirm={onConfirm} question="Delete it?">
        Delete
      </ConfirmButton>,
    );
    const user = userEvent.setup();
    await user.click(screen.getByRole('button', { name: 'Delete' }));

    const dialog = screen.getByRole('alertdialog', { name: 'Delete it?' });
    expect(dialog).toBeInTheDocument();
    expect(screen.getByRole('button', { name: 'Yes, delete' })).toHaveFocus();
    await user.click(screen.getByRole('button', { name: 'No, go back' }));
    expect(onConfirm).not.toHaveBeenCalled();
    expect(screen.getByRole('button', { name: 'Delete' })).toHaveFocus();

    await user.click(screen.getByRole('button', { name: 'Delete' }));
    await user.keyboard('{Enter}');
    expect(onConfirm).toHaveBeenCalledTimes(1);
    expect(screen.queryByRole('alertdialog')).not.toBeInTheDocument();
  });
});

describe('Pager', () => {
  it('offers first, previous and next pages as they apply', async () => {
    const onNext = vi.fn();
    const onFirst = vi.fn();
    render(<Pager hasNext hasPrevious={false} onNext={onNext} onFirst={onFirst} />);
    expect(screen.getByRole('navigation', { name: 'Pages' })).toBeInTheDocument();
    expect(screen.getByRole('button', { name: 'First page' })).toBeDisabled();
    expect(screen.queryByRole('button', { name: 'Previous page' })).not.toBeInTheDocument();
    await userEvent.setup().click(screen.getByRole('button', { name: 'Next page' }));
    expect(onNext).toHaveBeenCalled();
  });

  it('is not shown for a single page', () => {
    const { container } = render(<Pager hasNext={false} onNext={() => {}} />);
    expect(container).toBeEmptyDOMElement();
  });
});

describe('ErrorState, JsonView and Page', () => {
  it('announces the error and offers to try again', async () => {
    const retry = vi.fn();
    render(<ErrorState error={new ApiError(503, { error: 'redis down', code: 'store_unavailable' })} retry={retry} />);
    expect(screen.getByRole('alert')).toHaveTextContent('redis down (store_unavailable)');
    await userEvent.setup().click(screen.getByRole('button', { name: 'Try again' }));
    expect(retry).toHaveBeenCalled();
  });

  it('pretty-prints JSON under its label', () => {
    render(<JsonView value={{ a: [1] }} label="Result" />);
    const figure = screen.getByRole('figure');
    expect(within(figure).getByText('Result').tagName).toBe('FIGCAPTION');
    expect(figure).toHaveTextContent('"a": [');
  });

  it('gives the page one h1 and the tab a title', () => {
    render(<Page title="Jobs">content</Page>);
    expect(screen.getByRole('heading', { level: 1, name: 'Jobs' })).toBeInTheDocument();
    expect(document.title).toBe('Jobs · Cordum');
  });
});
