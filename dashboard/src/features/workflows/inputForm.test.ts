import { describe, expect, it } from 'vitest';

import { buildInputForm, initialValues, readInput, ROOT, ROOT_LABEL } from './inputForm';

const EXAMPLE_SCHEMA = {
  type: 'object',
  required: ['message', 'amount'],
  properties: {
    message: { type: 'string' },
    amount: { type: 'integer', minimum: 0 },
  },
};

describe('buildInputForm', () => {
  it('makes one field per simple property, with required marked', () => {
    const form = buildInputForm({
      type: 'object',
      required: ['amount'],
      properties: {
        message: { type: 'string', title: 'Message', description: 'What to echo' },
        amount: { type: 'integer' },
        ratio: { type: ['number', 'null'] },
        urgent: { type: 'boolean' },
        level: { type: 'string', enum: ['low', 'high'] },
      },
    });
    expect(form.mode).toBe('fields');
    expect(form.fields.map((f) => [f.name, f.label, f.kind, f.required])).toEqual([
      ['message', 'Message', 'string', false],
      ['amount', 'amount', 'integer', true],
      ['ratio', 'ratio', 'number', false],
      ['urgent', 'urgent', 'boolean', false],
      ['level', 'level', 'enum', false],
    ]);
    expect(form.fields[0]?.description).toBe('What to echo');
    expect(form.fields[4]?.options).toEqual([
      { label: 'low', value: 'low' },
      { label: 'high', value: 'high' },
    ]);
  });

  it('falls back to a labelled JSON textarea for nested objects, arrays and unions', () => {
    const form = buildInputForm({
      properties: {
        order: { type: 'object', properties: { id: { type: 'string' } } },
        lines: { type: 'array', items: { type: 'object' } },
        either: { anyOf: [{ type: 'string' }, { type: 'integer' }] },
      },
    });
    expect(form.fields.map((f) => [f.label, f.kind, f.jsonType])).toEqual([
      ['order (JSON)', 'json', 'object'],
      ['lines (JSON)', 'json', 'array'],
      ['either (JSON)', 'json', undefined],
    ]);
  });

  it.each([undefined, null, {}, { type: 'object' }, { type: 'array', items: {} }, 'nonsense'])(
    'gives one "Input (JSON)" textarea for %j',
    (schema) => {
      const form = buildInputForm(schema);
      expect(form.mode).toBe('json');
      expect(form.fields).toHaveLength(1);
      expect(form.fields[0]).toMatchObject({ name: ROOT, label: ROOT_LABEL, kind: 'json' });
    },
  );
});

describe('initialValues', () => {
  it('starts from the defaults, else empty', () => {
    const form = buildInputForm({
      properties: {
        message: { type: 'string', default: 'hi' },
        amount: { type: 'integer' },
        urgent: { type: 'boolean', default: true },
        quiet: { type: 'boolean' },
        level: { enum: ['low', 'high'], default: 'high' },
        tags: { type: 'array', default: ['a'] },
      },
    });
    expect(initialValues(form)).toEqual({
      message: 'hi',
      amount: '',
      urgent: true,
      quiet: false,
      level: '1',
      tags: JSON.stringify(['a'], null, 2),
    });
  });

  it('starts the whole-input textarea as an empty object', () => {
    expect(initialValues(buildInputForm(undefined))).toEqual({ [ROOT]: '{}' });
  });
});

describe('readInput', () => {
  const form = buildInputForm(EXAMPLE_SCHEMA);

  it('builds the input with typed values', () => {
    expect(readInput(form, { message: 'hello', amount: '250' })).toEqual({
      ok: true,
      input: { message: 'hello', amount: 250 },
    });
  });

  it('reports missing required fields and bad numbers', () => {
    expect(readInput(form, { message: '  ', amount: '2.5' })).toEqual({
      ok: false,
      errors: { message: 'Required.', amount: 'Must be a whole number.' },
    });
    expect(readInput(form, { message: 'x', amount: 'abc' })).toEqual({
      ok: false,
      errors: { amount: 'Must be a number.' },
    });
    expect(readInput(form, { message: 'x', amount: '-1' })).toEqual({
      ok: false,
      errors: { amount: 'Must be at least 0.' },
    });
  });

  it('leaves blank optional fields out and keeps booleans', () => {
    const optional = buildInputForm({
      properties: {
        note: { type: 'string' },
        ratio: { type: 'number' },
        urgent: { type: 'boolean' },
        level: { enum: ['low', 2, null] },
      },
    });
    expect(readInput(optional, { note: '', ratio: '', urgent: false, level: '' })).toEqual({
      ok: true,
      input: { urgent: false },
    });
    expect(readInput(optional, { note: 'n', ratio: '0.5', urgent: true, level: '1' })).toEqual({
      ok: true,
      input: { note: 'n', ratio: 0.5, urgent: true, level: 2 },
    });
  });

  it('checks string lengths, patterns and number bounds', () => {
    const strict = buildInputForm({
      properties: {
        code: { type: 'string', minLength: 2, maxLength: 3, pattern: '^[A-Z]+$' },
        score: { type: 'number', exclusiveMinimum: 0, maximum: 1 },
      },
    });
    expect(readInput(strict, { code: 'A', score: '0' })).toEqual({
      ok: false,
      errors: { code: 'Must be at least 2 characters.', score: 'Must be more than 0.' },
    });
    expect(readInput(strict, { code: 'abc', score: '2' })).toEqual({
      ok: false,
      errors: { code: 'Must match the pattern ^[A-Z]+$.', score: 'Must be at most 1.' },
    });
    expect(readInput(strict, { code: 'ABCD', score: '1' })).toEqual({
      ok: false,
      errors: { code: 'Must be at most 3 characters.' },
    });
  });

  it('parses JSON fields and checks their type', () => {
    const nested = buildInputForm({
      required: ['lines'],
      properties: { lines: { type: 'array' }, meta: { type: 'object' } },
    });
    expect(readInput(nested, { lines: '[{"sku": "A"}]', meta: '{"a": 1}' })).toEqual({
      ok: true,
      input: { lines: [{ sku: 'A' }], meta: { a: 1 } },
    });
    const bad = readInput(nested, { lines: '{"sku": "A"}', meta: '{oops' });
    expect(bad.ok).toBe(false);
    if (!bad.ok) {
      expect(bad.errors.lines).toBe('Must be a JSON array.');
      expect(bad.errors.meta).toMatch(/^Not valid JSON: /);
    }
  });

  it('reads the whole input from the JSON textarea', () => {
    const whole = buildInputForm(undefined);
    expect(readInput(whole, { [ROOT]: '{"order_id": "A-1"}' })).toEqual({
      ok: true,
      input: { order_id: 'A-1' },
    });
    expect(readInput(whole, { [ROOT]: '' })).toEqual({ ok: true, input: {} });
    expect(readInput(whole, { [ROOT]: '[1]' })).toEqual({
      ok: false,
      errors: { [ROOT]: 'Must be a JSON object.' },
    });
  });
});
