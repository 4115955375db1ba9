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
    // from api/; subsystems throw domain errors (@aenv/protocol) and the API maps them. The front door (front-door/)
    // puts the data plane before the API, and server.ts, the composition root, wires the API to the subsystems.
    files: ['packages/server/src/**/*.ts'],
    ignores: [
      'packages/server/src/api/**',
      'packages/server/src/front-door/**',
      'packages/server/src/composition/**',
      'packages/server/src/server.ts',
    ],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              regex: '^(\\.\\.?/)+api(/|$)',
              message:
                'only the API, the front door and the composition root (composition/, server.ts) may import from api/; see docs/architecture.md',
            },
          ],
        },
      ],
    },
  },
);
