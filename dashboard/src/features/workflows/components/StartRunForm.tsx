import { useId, useMemo, useRef, useState, type FormEvent } from 'react';
import { useNavigate } from 'react-router';

import { useStartRun } from '../api';
import {
  buildInputForm,
  initialValues,
  readInput,
  type FormErrors,
  type FormField,
  type FormValues,
} from '../inputForm';

import { RequestError } from './RequestError';

function newKey(): string {
  return globalThis.crypto?.randomUUID?.() ?? `${Date.now()}-${Math.random().toString(16).slice(2)}`;
}

type FieldProps = {
  field: FormField;
  inputId: string;
  value: string | boolean | undefined;
  error: string | undefined;
  onChange: (value: string | boolean) => void;
};

function FieldInput({ field, inputId, value, error, onChange }: FieldProps) {
  const hintId = `${inputId}-hint`;
  const errorId = `${inputId}-error`;
  const describedBy = [field.description ? hintId : '', error ? errorId : ''].filter(Boolean).join(' ') || undefined;
  const common = {
    id: inputId,
    name: field.name || 'input',
    required: field.required,
    'aria-invalid': error ? true : undefined,
    'aria-describedby': describedBy,
  };
  const text = typeof value === 'string' ? value : '';

  let control;
  switch (field.kind) {
    case 'boolean':
      control = (
        <input {...common} type="checkbox" checked={value === true} onChange={(e) => onChange(e.target.checked)} />
      );
      break;
    case 'enum': {
      const hasDefault = field.schema.default !== undefined;
      control = (
        <select {...common} value={text} onChange={(e) => onChange(e.target.value)}>
          {!(field.required && hasDefault) && <option value="">{field.required ? 'Choose…' : '(not set)'}</option>}
          {(field.options ?? []).map((option, i) => (
            <option key={option.label} value={String(i)}>
              {option.label}
            </option>
          ))}
        </select>
      );
      break;
    }
    case 'json':
      control = (
        <textarea
          {...common}
          className="wf-json"
          rows={field.name ? 4 : 8}
          spellCheck={false}
          value={text}
          onChange={(e) => onChange(e.target.value)}
        />
      );
      break;
    case 'number':
    case 'integer':
      control = (
        <input
          {...common}
          type="number"
          step={field.kind === 'integer' ? 1 : 'any'}
          inputMode={field.kind === 'integer' ? 'numeric' : 'decimal'}
          value={text}
          onChange={(e) => onChange(e.target.value)}
        />
      );
      break;
    default:
      control = <input {...common} type="text" value={text} onChange={(e) => onChange(e.target.value)} />;
  }

  const label = (
    <span className="wf-label-row">
      <label htmlFor={inputId}>{field.label}</label>
      {field.required && (
        <span className="wf-required" aria-hidden="true">
          *
        </span>
      )}
    </span>
  );
  return (
    <div className={field.kind === 'boolean' ? 'wf-field wf-field--inline' : 'wf-field'}>
      {field.kind === 'boolean' ? (
        <>
          {control}
          {label}
        </>
      ) : (
        <>
          {label}
          {control}
        </>
      )}
      {field.description && (
        <p id={hintId} className="wf-hint">
          {field.description}
        </p>
      )}
      {error && (
        <p id={errorId} className="wf-error">
          {error}
        </p>
      )}
    </div>
  );
}

/**
 * "Start run": inputs built from the definition's `input_schema`, checked here before
 * anything is sent, then the new run's page.
 */
export function StartRunForm({ workflowId, inputSchema }: { workflowId: string; inputSchema: unknown }) {
  const id = useId();
  const navigate = useNavigate();
  const start = useStartRun(workflowId);
  const form = useMemo(() => buildInputForm(inputSchema), [inputSchema]);
  const [values, setValues] = useState<FormValues>(() => initialValues(form));
  const [errors, setErrors] = useState<FormErrors>({});
  const [dryRun, setDryRun] = useState(false);
  // One key per attempt: sending the same values again (after a network error, say)
  // cannot start a second run; changing them makes a new attempt.
  const attemptKey = useRef(newKey());

  const change = (name: string, value: string | boolean) => {
    attemptKey.current = newKey();
    setValues((v) => ({ ...v, [name]: value }));
    setErrors((e) => {
      if (!(name in e)) return e;
      const rest = { ...e };
      delete rest[name];
      return rest;
    });
  };

  const submit = (e: FormEvent) => {
    e.preventDefault();
    const read = readInput(form, values);
    if (!read.ok) {
      setErrors(read.errors);
      const first = form.fields.findIndex((f) => f.name in read.errors);
      if (first >= 0) document.getElementById(`${id}-field-${first}`)?.focus();
      return;
    }
    setErrors({});
    start.mutate(
      { input: read.input, dryRun, idempotencyKey: attemptKey.current },
      {
        onSuccess: (runId) => {
          if (runId) void navigate(`/runs/${encodeURIComponent(runId)}`);
        },
      },
    );
  };

  const problems = Object.keys(errors).length;
  return (
    <form className="wf-start" onSubmit={submit} noValidate aria-labelledby={`${id}-heading`}>
      <h2 id={`${id}-heading`}>Start run</h2>
      {form.mode === 'fields' && form.fields.some((f) => f.required) && (
        <p className="wf-hint">
          Fields marked <span aria-hidden="true">*</span>
          <span className="visually-hidden">with an asterisk</span> are required.
        </p>
      )}
      {form.fields.map((field, i) => (
        <FieldInput
          key={field.name || 'input'}
          field={field}
          inputId={`${id}-field-${i}`}
          value={values[field.name]}
          error={errors[field.name]}
          onChange={(v) => change(field.name, v)}
        />
      ))}
      <div className="wf-field wf-field--inline">
        <input id={`${id}-dry`} type="checkbox" checked={dryRun} onChange={(e) => setDryRun(e.target.checked)} />
        <span className="wf-label-row">
          <label htmlFor={`${id}-dry`}>Dry run (dispatch no jobs)</label>
        </span>
      </div>
      {problems > 0 && (
        <p className="wf-error" role="alert">
          {problems === 1 ? 'One field needs attention.' : `${problems} fields need attention.`}
        </p>
      )}
      <button type="submit" disabled={start.isPending}>
        Start run
      </button>
      {start.isError && <RequestError error={start.error} />}
    </form>
  );
}
