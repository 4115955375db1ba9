// The conformance suite (packages/protocol/src/conformance) against a real node: envd's wire through the node's
// data-plane proxy (routing headers, as the SDKs send them) and the control plane's shapes and typed client.
import { afterAll, expect } from 'vitest';
import { Sandbox } from 'e2b';
import {
  AenvApiClient,
  ENVD_PORT,
  SANDBOX_ID_HEADER,
  SANDBOX_PORT_HEADER,
  type SandboxResponse,
} from '@aenv/protocol';
import {
  conformanceSuite,
  type ConformanceTarget,
  type Feature,
  type SandboxProfile,
  type TargetSandbox,
} from '@aenv/protocol/conformance';
import { startServer, type TestServer } from './harness.js';

const TEMPLATE = 'base';

function nodeTarget(): ConformanceTarget & { close(): Promise<void> } {
  let server: Promise<TestServer> | undefined;
  const node = () => (server ??= startServer({ name: 'conf' }));
  const sandboxes = new Map<string, Promise<TargetSandbox>>();

  async function start(profile: SandboxProfile): Promise<TargetSandbox> {
    const s = await node();
    const client = new AenvApiClient({ baseUrl: s.url, apiKey: s.apiKey });
    const body = { templateID: TEMPLATE, timeout: 1800, envVars: profile.envVars };
    // v2 sandboxes are always secured (NewSandboxV2); v1 ones only when asked.
    const created: SandboxResponse = profile.secure
      ? await client.sandboxes.create(body)
      : JSON.parse((await client.call('POST', '/sandboxes', { body: { ...body, secure: false } })).text);
    const sandboxId = created.sandboxID;
    const accessToken = created.envdAccessToken;
    const Ctor = Sandbox as unknown as new (opts: Record<string, unknown>) => Sandbox;
    return {
      url: s.url,
      routing: { [SANDBOX_ID_HEADER]: sandboxId, [SANDBOX_PORT_HEADER]: String(ENVD_PORT) },
      ...(accessToken ? { accessToken } : {}),
      workdir: '/home/user',
      sandboxId,
      templateId: created.templateID,
      sdk: (opts = {}) =>
        new Ctor({
          sandboxId,
          envdVersion: created.envdVersion,
          envdAccessToken: opts.withoutToken ? undefined : accessToken,
          sandboxUrl: s.url,
          apiUrl: s.url,
          apiKey: s.apiKey,
        }),
      logs: () => s.logs(),
    };
  }

  return {
    name: 'node',
    features: new Set<Feature>(['control-plane']),
    sandbox(profile) {
      let s = sandboxes.get(profile.name);
      if (!s) sandboxes.set(profile.name, (s = start(profile)));
      return s;
    },
    async controlPlane() {
      const s = await node();
      return { url: s.url, apiKey: s.apiKey, template: TEMPLATE };
    },
    async close() {
      if (server) expect(await (await server).shutdown()).toBe(0);
    },
  };
}

const target = nodeTarget();
afterAll(() => target.close());

conformanceSuite(target);
