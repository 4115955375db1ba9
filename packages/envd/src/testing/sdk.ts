import { Sandbox } from 'e2b';
import { ACCESS_TOKEN_HEADER } from '@aenv/protocol/envd';
import { ENVD_VERSION } from '../version.js';

/**
 * An e2b SDK Sandbox talking straight to envd at url (no control plane), built the way the SDK builds
 * one after create/connect, so every version gate sees our real ENVD_VERSION.
 */
export function sdkSandbox(url: string, envdAccessToken?: string): Sandbox {
  const Ctor = Sandbox as unknown as new (opts: Record<string, unknown>) => Sandbox;
  return new Ctor({
    sandboxId: 'envdtest',
    envdVersion: ENVD_VERSION,
    envdAccessToken,
    sandboxUrl: url,
    debug: true,
    apiKey: 'e2b_0000000000000000000000000000000000000000',
  });
}

/** POST /init as the aenv server does after create. */
export async function initEnvd(
  url: string,
  body: Record<string, unknown>,
  token?: string,
): Promise<Response> {
  return fetch(`${url}/init`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(token ? { [ACCESS_TOKEN_HEADER]: token } : {}) },
    body: JSON.stringify(body),
  });
}
