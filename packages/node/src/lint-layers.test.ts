import { fileURLToPath } from 'node:url';
import { ESLint } from 'eslint';
import { describe, expect, it } from 'vitest';

// The layer rules of docs/architecture.md as `npm run lint` runs them (eslint.config.js): each case lints a
// planted file at a path inside the repository (the file itself is never written) and reads the errors.
const ROOT = fileURLToPath(new URL('../../..', import.meta.url));
const eslint = new ESLint({ cwd: ROOT });

async function boundaryErrors(path: string, code: string): Promise<string[]> {
  const [result] = await eslint.lintText(code, { filePath: `${ROOT}${path}` });
  return result!.messages
    .filter((m) => m.ruleId === 'import-x/no-restricted-paths' || m.ruleId === 'no-restricted-imports')
    .map((m) => m.message);
}

const use = (spec: string) => `import * as planted from '${spec}';\nexport const x = planted;\n`;

describe('layer rules as lint import zones', () => {
  it.each([
    ['packages/node/src/network/planted.ts', '../orchestrator/orchestrator.js', 'below the subsystems'],
    ['packages/node/src/snapshot/planted.ts', '../backend/container-backend.js', 'below the subsystems'],
    ['packages/node/src/runtime/drivers/planted.ts', '../../template/index.js', 'below the subsystems'],
    ['packages/node/src/util/planted.ts', '../image/index.js', 'are leaves'],
    ['packages/node/src/orchestrator/planted.ts', '../api/errors.js', 'may import from api/'],
    ['packages/node/src/template/planted.ts', '../api/errors.js', 'may import from api/'],
    ['packages/node/src/orchestrator/planted.ts', '../backend/container-backend.js', 'defines the ports'],
    ['packages/node/src/proxy/planted.ts', '../front-door/data-planes.js', 'top of the node'],
    ['packages/node/src/api/planted.ts', '../composition/start-node.js', 'top of the node'],
    ['packages/envd/src/planted.ts', '@aenv/protocol', 'envd imports only @aenv/protocol/envd'],
    ['packages/envd/src/process/planted.ts', '@aenv/config', 'envd imports only @aenv/protocol/envd'],
    ['packages/cli/src/commands/planted.ts', '@aenv/node', 'the CLI imports only'],
    ['packages/cli/src/planted.ts', '@aenv/envd', 'the CLI imports only'],
    ['packages/node/src/backend/planted.ts', '@aenv/envd', 'does not import the in-sandbox envd'],
    ['packages/node/src/tools/planted.ts', '../orchestrator/orchestrator.js', 'below the subsystems'],
  ])('%s importing %s fails lint', async (path, spec, message) => {
    const errors = await boundaryErrors(path, use(spec));
    expect(errors).toHaveLength(1);
    expect(errors[0]).toContain(message);
  });

  it.each([
    ['packages/node/src/api/planted.ts', '../orchestrator/orchestrator.js'],
    ['packages/node/src/orchestrator/planted.ts', '../network/types.js'],
    ['packages/node/src/backend/planted.ts', '../runtime/index.js'],
    ['packages/node/src/composition/planted.ts', '../api/start.js'],
    ['packages/node/src/front-door/planted.ts', '../api/errors.js'],
    ['packages/node/src/api/planted.test.ts', '../front-door/http-server.js'],
    ['packages/envd/src/planted.ts', '@aenv/protocol/envd'],
    ['packages/cli/src/planted.ts', '@aenv/protocol'],
    ['packages/cli/src/planted.ts', '@aenv/config'],
    ['packages/cli/src/commands/services.ts', '@aenv/node'],
  ])('%s may import %s', async (path, spec) => {
    expect(await boundaryErrors(path, use(spec))).toEqual([]);
  });
});
