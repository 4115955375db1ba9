import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import { importX, createNodeResolver } from 'eslint-plugin-import-x';

// The layer rules of docs/architecture.md ("Layers and errors"), kept by lint: a violation fails `npm run lint`
// (eslint-layers.test.ts plants one of each kind and expects the error).
const SRC = 'packages/node/src';
const at = (...dirs) => dirs.map((d) => `./${SRC}/${d}`);
/** The node's subsystems, below the API. */
const SUBSYSTEMS = [
  'orchestrator',
  'backend',
  'template',
  'proxy',
  'cluster',
  'observability',
  'events',
  'extension',
];
/** What the subsystems are built on (the runtime driver, network slots, the image cache, the repository). */
const LOWER = ['runtime', 'network', 'image', 'snapshot', 'tools'];
/** Leaves: they import no other part of the node. */
const LEAVES = ['state', 'secrets', 'identity', 'util'];
/** The top: the composition root and the front door (the data plane before the API). */
const TOP = ['composition', 'front-door'];
const see = 'see docs/architecture.md, "Layers and errors"';
const ZONES = [
  {
    target: at(...SUBSYSTEMS, ...LOWER, ...LEAVES),
    from: at('api'),
    message: `only the API, the front door and the composition root may import from api/; ${see}`,
  },
  {
    target: at(...LOWER, ...LEAVES),
    from: at(...SUBSYSTEMS, 'api', ...TOP),
    message: `runtime/, network/, image/, snapshot/ and the leaves sit below the subsystems; ${see}`,
  },
  {
    target: at(...LEAVES),
    from: at(...LOWER),
    message: `state/, secrets/, identity/ and util/ are leaves: they import no other part of the node; ${see}`,
  },
  {
    target: at('orchestrator'),
    from: at('backend', 'template', 'proxy', 'cluster', 'observability', 'events'),
    message: `the orchestrator defines the ports its subsystems implement and imports none of them; ${see}`,
  },
];
const TOP_ZONE = {
  target: at('api', ...SUBSYSTEMS, ...LOWER, ...LEAVES),
  from: at(...TOP),
  message: `composition/ and front-door/ are the top of the node; nothing below imports them; ${see}`,
};

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
  ...[false, true].map((tests) => ({
    // Layers inside the node, as zones: files under `target` may not import files under `from`. Tests may
    // compose a front door of their own; nothing else below the top imports it.
    files: tests ? [`${SRC}/**/*.test.ts`] : [`${SRC}/**/*.ts`],
    ...(tests ? {} : { ignores: ['**/*.test.ts'] }),
    plugins: { 'import-x': importX },
    settings: {
      'import-x/resolver-next': [
        createNodeResolver({ extensions: ['.ts', '.js'], extensionAlias: { '.js': ['.ts', '.js'] } }),
      ],
    },
    rules: { 'import-x/no-restricted-paths': ['error', { zones: tests ? ZONES : [...ZONES, TOP_ZONE] }] },
  })),
  {
    // The node runs on the host: it ships envd's build products in the tools dir and imports none of its code.
    files: [`${SRC}/**/*.ts`],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              regex: '^@aenv/envd(/|$)',
              message: `the node does not import the in-sandbox envd package; ${see}`,
            },
          ],
        },
      ],
    },
  },
  {
    // envd runs inside every sandbox: it may import only the envd part of the contract (its bundle refuses more).
    files: ['packages/envd/src/**/*.ts'],
    ignores: ['**/*.test.ts', 'packages/envd/src/testing/**'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              regex: '^@aenv/(?!protocol/envd$)',
              message: `envd imports only @aenv/protocol/envd of the aenv packages; ${see}`,
            },
          ],
        },
      ],
    },
  },
  {
    // The CLI speaks to the API through @aenv/protocol's clients; only the service launcher starts the processes
    // of the other packages (`aenv server`, `aenv scheduler`, `aenv gateway`).
    files: ['packages/cli/src/**/*.ts'],
    ignores: ['**/*.test.ts', 'packages/cli/src/commands/services.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              regex: '^@aenv/(?!(protocol|config)$)',
              message: `the CLI imports only @aenv/protocol and @aenv/config of the aenv packages; ${see}`,
            },
          ],
        },
      ],
    },
  },
);
