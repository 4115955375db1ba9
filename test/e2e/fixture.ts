// One node per describe block: what nearly every e2e file needs before its first test and after its last.
import { afterAll, afterEach, beforeAll, expect } from 'vitest';
import { endNode, startServer, useSdk, type TestServer, type TestServerOptions } from './harness.js';

export interface DescribeNode {
  /**
   * The node, usable anywhere inside the describe's hooks and tests (it starts in the first `beforeAll`);
   * pass it where a `TestServer` is expected. Its `restart()` (after a `stop()` or `crash()`) replaces the node
   * that the teardown ends and the SDK talks to.
   */
  server: TestServer;
  /** Remembers a sandbox a test made, to be killed after that test. Returns it. */
  track<T extends { sandboxId: string }>(sandbox: T): T;
  /** `track` by id (a sandbox made through the raw API). */
  trackId(id: string): void;
}

/**
 * Called at the top of a `describe`: starts a node with `options` (a function when they depend on something an
 * earlier `beforeAll` starts) in `beforeAll` and points the e2b SDK at it; kills the sandboxes passed to `track`
 * after each test; after the last test (and after the describe's own `afterAll` hooks, which run first) kills
 * every sandbox, expects no host object left behind (harness.ts `strayHostObjects`) and a graceful exit 0.
 */
export function describeNode(options: TestServerOptions | (() => TestServerOptions)): DescribeNode {
  let current: TestServer | undefined;
  const tracked: string[] = [];
  const node = (): TestServer => {
    if (!current) throw new Error('the node of this describe is not started yet (it starts in beforeAll)');
    return current;
  };

  beforeAll(async () => {
    current = await startServer(typeof options === 'function' ? options() : options);
    useSdk(current);
  });
  afterEach(async () => {
    await Promise.all(tracked.splice(0).map((id) => node().api('DELETE', `/sandboxes/${id}`)));
  });
  afterAll(async () => {
    if (current) expect(await endNode(current)).toEqual({ stray: [], exitCode: 0 });
  });

  const server: TestServer = {
    get url() {
      return node().url;
    },
    get port() {
      return node().port;
    },
    get apiKey() {
      return node().apiKey;
    },
    get home() {
      return node().home;
    },
    get runtimePath() {
      return node().runtimePath;
    },
    get prefix() {
      return node().prefix;
    },
    get cidrs() {
      return node().cidrs;
    },
    logs: () => node().logs(),
    stop: () => node().stop(),
    crash: () => node().crash(),
    async restart() {
      current = await node().restart();
      useSdk(current);
      return server;
    },
    api: (method, path, body) => node().api(method, path, body),
    killAll: () => node().killAll(),
    shutdown: () => node().shutdown(),
  };
  return {
    server,
    track(sandbox) {
      tracked.push(sandbox.sandboxId);
      return sandbox;
    },
    trackId(id) {
      tracked.push(id);
    },
  };
}

/** Deletes the node's templates with a name starting with `prefix` (a test file's run id), as listed at `listPath`. */
export async function deleteTemplatesNamed(
  server: TestServer,
  prefix: string,
  listPath = '/templates',
): Promise<void> {
  const list = await server.api('GET', listPath);
  for (const t of (list.body ?? []) as { templateID: string; names: string[] }[])
    if (t.names.some((n) => n.startsWith(prefix))) await server.api('DELETE', `/templates/${t.templateID}`);
}
