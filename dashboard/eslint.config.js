// @ts-check
import { readdirSync } from 'node:fs';

import js from '@eslint/js';
import jsxA11y from 'eslint-plugin-jsx-a11y';
import reactHooks from 'eslint-plugin-react-hooks';
import globals from 'globals';
import tseslint from 'typescript-eslint';

/** The feature folders: each gets a rule that it imports no other (and not the app). */
const FEATURES = readdirSync(new URL('./src/features', import.meta.url), { withFileTypes: true })
  .filter((entry) => entry.isDirectory())
  .map((entry) => entry.name);

const escape = (text) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** no-restricted-imports for the files of `feature`: other features, by alias or by a relative path. */
function featureBoundary(feature) {
  const others = FEATURES.filter((name) => name !== feature).map(escape);
  const patterns = [
    {
      regex: '^@/app(/|$)',
      message: 'A feature does not import the app: the app imports features.',
    },
  ];
  if (others.length > 0) {
    const names = `(${others.join('|')})`;
    patterns.push(
      {
        regex: `^@/features/${names}(/|$)`,
        message: `Features never import each other: move what ${feature} needs into src/components or src/lib.`,
      },
      {
        regex: `^(\\.\\./)+(features/)?${names}(/|$)`,
        message: `Features never import each other: move what ${feature} needs into src/components or src/lib.`,
      },
    );
  }
  return {
    files: [`src/features/${feature}/**/*.{ts,tsx}`],
    rules: { 'no-restricted-imports': ['error', { patterns }] },
  };
}

export default tseslint.config(
  { ignores: ['dist', 'node_modules', 'src/lib/schema.d.ts', 'coverage'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  reactHooks.configs.flat['recommended-latest'],
  jsxA11y.flatConfigs.recommended,
  {
    languageOptions: {
      ecmaVersion: 2022,
      sourceType: 'module',
      globals: { ...globals.browser },
    },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/consistent-type-imports': ['error', { fixStyle: 'inline-type-imports' }],
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            { regex: '^(\\.\\./)+features/', message: 'Import a feature through @/features/<name>.' },
          ],
        },
      ],
      'no-restricted-globals': [
        'error',
        { name: 'localStorage', message: 'The session lives in sessionStorage only.' },
      ],
    },
  },
  {
    files: ['src/components/**/*.{ts,tsx}', 'src/lib/**/*.{ts,tsx}', 'src/testing/**/*.{ts,tsx}'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            { regex: '^@/(features|app)(/|$)', message: 'Shared code does not import features or the app.' },
            { regex: '^(\\.\\./)+(features|app)(/|$)', message: 'Shared code does not import features or the app.' },
          ],
        },
      ],
    },
  },
  ...FEATURES.map(featureBoundary),
  {
    files: ['*.{js,ts}'],
    languageOptions: { globals: { ...globals.node } },
  },
);
