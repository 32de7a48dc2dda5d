/**
 * The "Start run" form, derived from a definition's `input_schema` (JSON Schema).
 *
 * Top-level properties of type string, number, integer or boolean, and properties with
 * an `enum` of plain values, become one input each; anything else (objects, arrays,
 * `$ref`, unions) is a JSON textarea for that property. A definition without a usable
 * object schema gets a single JSON textarea for the whole input.
 *
 * The checks here are a convenience that catches typing mistakes before a request is
 * sent; the gateway applies the full schema at run start and has the last word.
 */

export type JsonSchema = {
  type?: string | string[];
  title?: string;
  description?: string;
  enum?: unknown[];
  default?: unknown;
  properties?: Record<string, unknown>;
  required?: string[];
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number | boolean;
  exclusiveMaximum?: number | boolean;
  minLength?: number;
  maxLength?: number;
  pattern?: string;
};

export type FieldKind = 'string' | 'number' | 'integer' | 'boolean' | 'enum' | 'json';

export type EnumOption = { label: string; value: unknown };

export type FormField = {
  /** The property name; `ROOT` for the single textarea holding the whole input. */
  name: string;
  label: string;
  kind: FieldKind;
  required: boolean;
  description?: string;
  /** For `enum`: the choices, in schema order (a select's value is the index). */
  options?: EnumOption[];
  /** For `json`: the JSON type the value must have, when the schema says one. */
  jsonType?: 'object' | 'array';
  schema: JsonSchema;
};

export type InputForm = {
  /** `fields`: one input per property; `json`: one textarea for the whole input. */
  mode: 'fields' | 'json';
  fields: FormField[];
};

/** What the inputs hold: text for every kind but `boolean`. */
export type FormValues = Record<string, string | boolean>;

export type FormErrors = Record<string, string>;

export type ReadResult =
  | { ok: true; input: Record<string, unknown> }
  | { ok: false; errors: FormErrors };

export const ROOT = '';
export const ROOT_LABEL = 'Input (JSON)';

const SIMPLE_TYPES = new Set(['string', 'number', 'integer', 'boolean']);

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The one type a schema names, ignoring `"null"` in a list of types. */
function singleType(schema: JsonSchema): string | undefined {
  if (typeof schema.type === 'string') return schema.type;
  if (Array.isArray(schema.type)) {
    const types = schema.type.filter((t) => t !== 'null');
    return types.length === 1 ? types[0] : undefined;
  }
  return undefined;
}

function isPlain(value: unknown): boolean {
  return value === null || ['string', 'number', 'boolean'].includes(typeof value);
}

function optionLabel(value: unknown): string {
  return typeof value === 'string' ? value : JSON.stringify(value);
}

function fieldOf(name: string, raw: unknown, required: boolean): FormField {
  const schema: JsonSchema = isObject(raw) ? (raw as JsonSchema) : {};
  const title = typeof schema.title === 'string' && schema.title.trim() ? schema.title : name;
  const description = typeof schema.description === 'string' ? schema.description : undefined;
  const base = { name, required, description, schema };
  if (Array.isArray(schema.enum) && schema.enum.length > 0 && schema.enum.every(isPlain)) {
    const options = schema.enum.map((value) => ({ label: optionLabel(value), value }));
    return { ...base, label: title, kind: 'enum', options };
  }
  const type = singleType(schema);
  if (type && SIMPLE_TYPES.has(type)) {
    return { ...base, label: title, kind: type as FieldKind };
  }
  const jsonType = type === 'object' || type === 'array' ? type : undefined;
  return { ...base, label: `${title} (JSON)`, kind: 'json', jsonType };
}

function rootField(): FormField {
  return { name: ROOT, label: ROOT_LABEL, kind: 'json', required: false, jsonType: 'object', schema: {} };
}

/** The form for a definition's `input_schema` (absent, null or unusable: one JSON textarea). */
export function buildInputForm(inputSchema: unknown): InputForm {
  if (!isObject(inputSchema)) return { mode: 'json', fields: [rootField()] };
  const schema = inputSchema as JsonSchema;
  const type = singleType(schema);
  const properties = schema.properties;
  if ((type !== undefined && type !== 'object') || !isObject(properties)
      || Object.keys(properties).length === 0) {
    return { mode: 'json', fields: [rootField()] };
  }
  const required = new Set(Array.isArray(schema.required) ? schema.required : []);
  const fields = Object.entries(properties).map(([name, raw]) => fieldOf(name, raw, required.has(name)));
  return { mode: 'fields', fields };
}

function initialValue(field: FormField): string | boolean {
  const fallback = field.schema.default;
  switch (field.kind) {
    case 'boolean':
      return fallback === true;
    case 'enum': {
      if (fallback === undefined) return '';
      const index = (field.options ?? []).findIndex((o) => Object.is(o.value, fallback)
        || JSON.stringify(o.value) === JSON.stringify(fallback));
      return index >= 0 ? String(index) : '';
    }
    case 'json':
      return fallback === undefined ? (field.name === ROOT ? '{}' : '') : JSON.stringify(fallback, null, 2);
    default:
      return fallback === undefined || fallback === null ? '' : String(fallback);
  }
}

/** The inputs' starting values: the schema's `default`s, else empty (booleans false). */
export function initialValues(form: InputForm): FormValues {
  return Object.fromEntries(form.fields.map((f) => [f.name, initialValue(f)]));
}

function boundsError(field: FormField, n: number): string | undefined {
  const { minimum, maximum, exclusiveMinimum, exclusiveMaximum } = field.schema;
  if (typeof minimum === 'number') {
    if (exclusiveMinimum === true && n <= minimum) return `Must be more than ${minimum}.`;
    if (n < minimum) return `Must be at least ${minimum}.`;
  }
  if (typeof maximum === 'number') {
    if (exclusiveMaximum === true && n >= maximum) return `Must be less than ${maximum}.`;
    if (n > maximum) return `Must be at most ${maximum}.`;
  }
  if (typeof exclusiveMinimum === 'number' && n <= exclusiveMinimum) {
    return `Must be more than ${exclusiveMinimum}.`;
  }
  if (typeof exclusiveMaximum === 'number' && n >= exclusiveMaximum) {
    return `Must be less than ${exclusiveMaximum}.`;
  }
  return undefined;
}

function stringError(field: FormField, text: string): string | undefined {
  const { minLength, maxLength, pattern } = field.schema;
  // JSON Schema counts code points, not UTF-16 units.
  const length = [...text].length;
  if (typeof minLength === 'number' && length < minLength) {
    return `Must be at least ${minLength} characters.`;
  }
  if (typeof maxLength === 'number' && length > maxLength) {
    return `Must be at most ${maxLength} characters.`;
  }
  if (typeof pattern === 'string') {
    let re: RegExp | undefined;
    try {
      re = new RegExp(pattern, 'u');
    } catch {
      re = undefined; // a pattern this browser cannot compile is left to the gateway
    }
    if (re && !re.test(text)) return `Must match the pattern ${pattern}.`;
  }
  return undefined;
}

type Parsed = { value?: unknown; present: boolean; error?: string };

function parseField(field: FormField, raw: string | boolean | undefined): Parsed {
  if (field.kind === 'boolean') return { value: raw === true, present: true };
  const text = typeof raw === 'string' ? raw : '';
  // Strings keep their spaces; a blank is still "nothing entered".
  const blank = text.trim() === '';
  if (blank) {
    if (field.name === ROOT) return { value: {}, present: true };
    return field.required ? { present: false, error: 'Required.' } : { present: false };
  }
  switch (field.kind) {
    case 'string': {
      const error = stringError(field, text);
      return error ? { present: true, error } : { value: text, present: true };
    }
    case 'number':
    case 'integer': {
      const n = Number(text.trim());
      if (!Number.isFinite(n)) return { present: true, error: 'Must be a number.' };
      if (field.kind === 'integer' && !Number.isInteger(n)) {
        return { present: true, error: 'Must be a whole number.' };
      }
      const error = boundsError(field, n);
      return error ? { present: true, error } : { value: n, present: true };
    }
    case 'enum': {
      const option = (field.options ?? [])[Number(text)];
      return option ? { value: option.value, present: true } : { present: true, error: 'Choose a value.' };
    }
    case 'json': {
      let value: unknown;
      try {
        value = JSON.parse(text);
      } catch (e) {
        return { present: true, error: `Not valid JSON: ${(e as Error).message}` };
      }
      if (field.jsonType === 'object' && !isObject(value)) {
        return { present: true, error: 'Must be a JSON object.' };
      }
      if (field.jsonType === 'array' && !Array.isArray(value)) {
        return { present: true, error: 'Must be a JSON array.' };
      }
      return { value, present: true };
    }
    default:
      return { present: false };
  }
}

/** The run input the values make, or each field's problem. Blank optional fields are left out. */
export function readInput(form: InputForm, values: FormValues): ReadResult {
  const errors: FormErrors = {};
  if (form.mode === 'json') {
    const parsed = parseField(form.fields[0] ?? rootField(), values[ROOT]);
    if (parsed.error) return { ok: false, errors: { [ROOT]: parsed.error } };
    return { ok: true, input: parsed.value as Record<string, unknown> };
  }
  const input: Record<string, unknown> = {};
  for (const field of form.fields) {
    const parsed = parseField(field, values[field.name]);
    if (parsed.error) errors[field.name] = parsed.error;
    else if (parsed.present) input[field.name] = parsed.value;
  }
  return Object.keys(errors).length > 0 ? { ok: false, errors } : { ok: true, input };
}
