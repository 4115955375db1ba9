import { request } from 'node:http';

export interface EnvdInit {
  envVars: Record<string, string>;
  /** The sandbox's token, or '' to clear one the restored envd still holds. */
  accessToken?: string;
  /** aenv extensions: identity of the sandbox (a fork or snapshot launch changes it). */
  sandboxId?: string;
  templateId?: string;
  defaultUser: string;
  defaultWorkdir?: string;
  timestamp: string;
  /** aenv: the init key envd requires from the next /init on (docs/security.md, "envd /init"). */
  initKey?: string;
  /** aenv: limits on signed /files URLs (`[sandbox_proxy].signed_url_max_lifetime_secs`). */
  signatureMaxLifetimeSecs?: number;
  unexpiringSignaturesUntil?: number;
}

/** What proves to envd that this /init comes from the node. */
export interface EnvdInitCredentials {
  /** The init key envd holds now: the one it was booted with, or the one the last /init set. */
  initKey: string;
  /** The access token envd holds now (only an envd without an init key checks it). */
  token?: string;
}

function call(
  host: string,
  port: number,
  method: string,
  path: string,
  timeoutMs: number,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    const req = request(
      {
        host,
        port,
        method,
        path,
        agent: false,
        timeout: timeoutMs,
        headers: {
          ...headers,
          ...(payload
            ? { 'content-type': 'application/json', 'content-length': String(payload.length) }
            : {}),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString() }));
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error(`envd ${method} ${path} timed out after ${timeoutMs} ms`)));
    req.on('error', reject);
    req.end(payload);
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Polls envd's `/health` every `pollMs` until it answers 204, for at most `timeoutMs`
 * (`[envd].poll_ms`, `[envd].init_timeout_secs`).
 */
export async function waitForEnvd(
  host: string,
  port: number,
  opts: { pollMs: number; timeoutMs: number; isAlive?: () => Promise<boolean> | boolean },
): Promise<void> {
  const deadline = Date.now() + opts.timeoutMs;
  let last = '';
  for (let attempt = 0; ; attempt++) {
    try {
      const r = await call(host, port, 'GET', '/health', Math.min(1000, Math.max(50, deadline - Date.now())));
      if (r.status === 204 || r.status === 200) return;
      last = `status ${r.status}`;
    } catch (e) {
      last = (e as Error).message;
    }
    if (Date.now() >= deadline) {
      throw new Error(`envd at ${host}:${port} not healthy after ${opts.timeoutMs} ms (last: ${last})`);
    }
    if (opts.isAlive && attempt % 50 === 49 && !(await opts.isAlive())) {
      throw new Error(`sandbox init exited before envd became healthy (last: ${last})`);
    }
    await sleep(opts.pollMs);
  }
}

/**
 * `POST /init` (called after every start and resume). envd accepts it only with the init key it holds
 * (`current.initKey`: a fresh boot's is its container's, a restored fork or snapshot holds its source's); an
 * envd from before init keys existed checks the access token it holds instead (`current.token`).
 */
export async function initEnvd(
  host: string,
  port: number,
  init: EnvdInit,
  current: EnvdInitCredentials,
  timeoutMs = 10_000,
): Promise<void> {
  const headers: Record<string, string> = { 'x-aenv-init-key': current.initKey };
  if (current.token) headers['x-access-token'] = current.token;
  const r = await call(host, port, 'POST', '/init', timeoutMs, init, headers);
  if (r.status !== 204 && r.status !== 200) {
    throw new Error(`envd /init answered ${r.status}: ${r.body.slice(0, 200)}`);
  }
}
