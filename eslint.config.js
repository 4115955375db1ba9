import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['**/dist/**', '**/node_modules/**', 'packages/protocol/src/gen/**', '**/*.d.ts'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { globals: { process: 'readonly', console: 'readonly', Buffer: 'readonly' } },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/consistent-type-imports': 'error',
    },
  },
  {
    // Layer rule (docs/architecture.md): the HTTP API sits on top of the node's subsystems. Nothing below it imports
    // from api/; subsystems throw domain errors (@aenv/protocol) and the API maps them. server.ts, the composition
    // root, wires the API to them.
    files: ['packages/server/src/**/*.ts'],
    ignores: ['packages/server/src/api/**', 'packages/server/src/server.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              regex: '^(\\.\\.?/)+api(/|$)',
              message:
                'only the API and the composition root (server.ts) may import from api/; see docs/architecture.md',
            },
          ],
        },
      ],
    },
  },
);
