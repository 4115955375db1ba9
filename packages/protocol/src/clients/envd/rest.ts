// The node's client of envd's REST API: `/health` (is it up), `/init` (hand it the sandbox) and `/files`
// uploads. Plain node:http with no connection reuse: envd is a fresh address per sandbox.
import { request } from 'node:http';
import type { Readable, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { ACCESS_TOKEN_HEADER, INIT_KEY_HEADER } from '../../envd/headers.js';
import { validateInitBody, type InitBody } from '../../envd/init.js';

/** What proves to envd that this /init comes from the node. */
export interface EnvdInitCredentials {
  /** The init key envd holds now: the one it was booted with, or the one the last /init set. */
  initKey: string;
  /** The access token envd holds now (only an envd without an init key checks it). */
  token?: string;
}

/** An envd REST call that did not get the answer it needs; `status` is envd's, when it answered. */
export class EnvdRestError extends Error {
  constructor(
    message: string,
    readonly status?: number,
  ) {
    super(message);
    this.name = 'EnvdRestError';
  }
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
 * envd from before init keys existed checks the access token it holds instead (`current.token`). The body is
 * checked with envd's own validator first (InitBodyError): what envd would refuse is never sent.
 */
export async function initEnvd(
  host: string,
  port: number,
  init: InitBody,
  current: EnvdInitCredentials,
  timeoutMs = 10_000,
): Promise<void> {
  validateInitBody(init);
  const headers: Record<string, string> = { [INIT_KEY_HEADER]: current.initKey };
  if (current.token) headers[ACCESS_TOKEN_HEADER] = current.token;
  const r = await call(host, port, 'POST', '/init', timeoutMs, init, headers);
  if (r.status !== 204 && r.status !== 200) {
    throw new EnvdRestError(`envd /init answered ${r.status}: ${r.body.slice(0, 200)}`, r.status);
  }
}

/** The file of an envd `/files` transfer and who reads or writes it. */
export interface FilesTarget {
  path: string;
  user: string;
  accessToken?: string;
  headers?: Record<string, string>;
}

function filesUrl(baseUrl: string, target: FilesTarget): URL {
  const url = new URL('/files', baseUrl);
  url.searchParams.set('path', target.path);
  url.searchParams.set('username', target.user);
  return url;
}

/** `POST /files?path=&username=` with a raw body streamed from `body` (exactly `size` bytes). */
export function uploadFile(
  baseUrl: string,
  target: FilesTarget,
  body: Readable,
  size: number,
  timeoutMs = 10 * 60_000,
): Promise<void> {
  const { path, accessToken, headers } = target;
  const url = filesUrl(baseUrl, target);
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      {
        method: 'POST',
        agent: false,
        timeout: timeoutMs,
        headers: {
          ...headers,
          'content-type': 'application/octet-stream',
          'content-length': String(size),
          ...(accessToken ? { [ACCESS_TOKEN_HEADER]: accessToken } : {}),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          if (res.statusCode === 200) resolve();
          else
            reject(
              new EnvdRestError(
                `envd upload of ${path} answered ${res.statusCode}: ${Buffer.concat(chunks).toString().slice(0, 300)}`,
                res.statusCode,
              ),
            );
        });
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error(`envd upload of ${path} timed out`)));
    req.on('error', (e) => reject(new EnvdRestError(`envd upload of ${path} failed: ${e.message}`)));
    body.on('error', (e) => req.destroy(e));
    body.pipe(req);
  });
}

/**
 * `GET /files?path=&username=`: streams the file into `dest` (which is ended). A non-200 answer rejects with
 * envd's status and message, and nothing is written to `dest`.
 */
export function downloadFile(
  baseUrl: string,
  target: FilesTarget,
  dest: Writable,
  timeoutMs = 10 * 60_000,
): Promise<void> {
  const { path, accessToken, headers } = target;
  const url = filesUrl(baseUrl, target);
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      {
        method: 'GET',
        agent: false,
        timeout: timeoutMs,
        headers: { ...headers, ...(accessToken ? { [ACCESS_TOKEN_HEADER]: accessToken } : {}) },
      },
      (res) => {
        if (res.statusCode !== 200) {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () =>
            reject(
              new EnvdRestError(
                `envd download of ${path} answered ${res.statusCode}: ${envdMessage(Buffer.concat(chunks).toString())}`,
                res.statusCode,
              ),
            ),
          );
          res.on('error', reject);
          return;
        }
        pipeline(res, dest).then(resolve, (e: Error) =>
          reject(new EnvdRestError(`envd download of ${path} failed: ${e.message}`)),
        );
      },
    );
    req.on('timeout', () => req.destroy(new Error(`envd download of ${path} timed out`)));
    req.on('error', (e) => reject(new EnvdRestError(`envd download of ${path} failed: ${e.message}`)));
    req.end();
  });
}

/** envd's `{message}` out of an error body, or the body's start. */
function envdMessage(text: string): string {
  try {
    const j = JSON.parse(text) as { message?: unknown };
    if (typeof j.message === 'string') return j.message;
  } catch {
    // not JSON
  }
  return text.trim().slice(0, 300);
}
