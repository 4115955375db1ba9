import { defineConfig } from 'vitest/config';
import { fileURLToPath } from 'node:url';

const pkg = (name: string, sub = '') =>
  fileURLToPath(new URL(`./packages/${name}/src/${sub}index.ts`, import.meta.url));
// First match wins: the protocol's subpaths before the package itself.
const alias = {
  '@aenv/protocol/envd': pkg('protocol', 'envd/'),
  '@aenv/protocol/conformance': pkg('protocol', 'conformance/'),
  '@aenv/config': pkg('config'),
  '@aenv/protocol': pkg('protocol'),
  '@aenv/envd': pkg('envd'),
  '@aenv/proxy': pkg('proxy'),
  '@aenv/node': pkg('node'),
};

// Three kinds of tests:
//  - unit:        *.test.ts beside the code; no privileges, no host changes.
//  - integration: *.int.test.ts beside the code; need root and the host tools (runc, nft, ip, CRIU).
//  - e2e:         test/e2e/**/*.test.ts; a real `aenv server` driven by the real e2b SDK.
//  - security:    test/security/**/*.test.ts; attacks on a real `aenv server` (raw sockets, the SDK), by class
//                 of docs/security.md.
// Integration and e2e files run one at a time: they share the host's kernel resources on 2 cores.
export default defineConfig({
  resolve: { alias },
  test: {
    projects: [
      {
        resolve: { alias },
        test: {
          name: 'unit',
          include: ['packages/*/src/**/*.test.ts'],
          exclude: ['packages/*/src/**/*.int.test.ts', '**/node_modules/**', '**/dist/**'],
          testTimeout: 20_000,
        },
      },
      {
        resolve: { alias },
        test: {
          name: 'integration',
          include: ['packages/*/src/**/*.int.test.ts'],
          fileParallelism: false,
          testTimeout: 120_000,
          hookTimeout: 300_000,
        },
      },
      {
        resolve: { alias },
        test: {
          name: 'e2e',
          include: ['test/e2e/**/*.test.ts'],
          setupFiles: ['test/e2e/setup.ts'],
          fileParallelism: false,
          testTimeout: 180_000,
          hookTimeout: 300_000,
        },
      },
      {
        resolve: { alias },
        test: {
          name: 'security',
          include: ['test/security/**/*.test.ts'],
          setupFiles: ['test/e2e/setup.ts'],
          fileParallelism: false,
          // After the unit, integration and e2e files: no third stream of root tests on the same cores.
          sequence: { groupOrder: 1 },
          testTimeout: 180_000,
          hookTimeout: 300_000,
        },
      },
    ],
  },
});
