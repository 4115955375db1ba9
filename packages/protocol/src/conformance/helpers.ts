// Ways to reach a target's envd that every case shares: Connect clients and fetch with the target's routing
// headers, a shell inside the sandbox, and bounded polling.
import { request, type IncomingHttpHeaders } from 'node:http';
import { createClient } from '@connectrpc/connect';
import { createConnectTransport } from '@connectrpc/connect-node';
import { ACCESS_TOKEN_HEADER } from '../envd/headers.js';
import { Filesystem } from '../gen/filesystem/filesystem_pb.js';
import {
  Process,
  type ConnectResponse,
  type ProcessEvent,
  type StartResponse,
} from '../gen/process/process_pb.js';
import { EnvdRpcClient } from '../clients/envd/rpc.js';
import type { Feature, TargetSandbox } from './target.js';

/** `process.Process` and `filesystem.Filesystem` clients of the sandbox's envd over the given codec and HTTP. */
export function clients(sbx: TargetSandbox, opts: { binary: boolean; http2?: boolean; token?: string }) {
  const headers = { ...sbx.routing, ...(opts.token ? { [ACCESS_TOKEN_HEADER]: opts.token } : {}) };
  const transport = createConnectTransport({
    baseUrl: sbx.url,
    httpVersion: opts.http2 ? '2' : '1.1',
    useBinaryFormat: opts.binary,
    interceptors: [
      (next) => (req) => {
        for (const [k, v] of Object.entries(headers)) req.header.set(k, v);
        return next(req);
      },
    ],
  });
  return { process: createClient(Process, transport), fs: createClient(Filesystem, transport) };
}

/** fetch of `path` on the sandbox's envd, routed there. */
export function envdFetch(sbx: TargetSandbox, path: string, init: RequestInit = {}): Promise<Response> {
  return fetch(`${sbx.url}${path}`, {
    ...init,
    headers: { ...sbx.routing, ...(init.headers as Record<string, string> | undefined) },
  });
}

/** A raw GET (no transparent decompression, unlike fetch): status, headers and the exact body bytes. */
export function rawGet(
  sbx: TargetSandbox,
  path: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; headers: IncomingHttpHeaders; body: Buffer }> {
  return new Promise((resolve, reject) => {
    request(`${sbx.url}${path}`, { headers: { ...sbx.routing, ...headers } }, (r) => {
      const chunks: Buffer[] = [];
      r.on('data', (c: Buffer) => chunks.push(c));
      r.on('end', () =>
        resolve({ status: r.statusCode ?? 0, headers: r.headers, body: Buffer.concat(chunks) }),
      );
      r.on('error', reject);
    })
      .on('error', reject)
      .end();
  });
}

/** The node's envd client for this sandbox (what template builds use). */
export function rpcClient(sbx: TargetSandbox): EnvdRpcClient {
  return new EnvdRpcClient({
    baseUrl: sbx.url,
    headers: sbx.routing,
    ...(sbx.accessToken ? { accessToken: sbx.accessToken } : {}),
  });
}

/** Runs `script` with /bin/sh in the sandbox as its default user; throws unless it exits 0. */
export async function sh(sbx: TargetSandbox, script: string): Promise<string> {
  const r = await rpcClient(sbx).output({ cmd: '/bin/sh', args: ['-c', script] });
  if (r.exitCode !== 0) throw new Error(`sh -c ${JSON.stringify(script)}: ${r.status}\n${r.stderr}`);
  return r.stdout;
}

/** A POSIX shell word: `s` single-quoted. */
export const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/** Whether a process with this pid runs in the sandbox. */
export async function alive(sbx: TargetSandbox, pid: number): Promise<boolean> {
  return (await sh(sbx, `kill -0 ${pid} 2>/dev/null && echo yes || echo no`)).trim() === 'yes';
}

/** Polls `pred` every 50 ms, at most `tries` times; its last answer. */
export async function until(pred: () => boolean | Promise<boolean>, tries = 100): Promise<boolean> {
  for (let i = 0; i < tries; i++) {
    if (await pred()) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return pred();
}

export async function collect(
  stream: AsyncIterable<StartResponse | ConnectResponse>,
): Promise<ProcessEvent[]> {
  const out: ProcessEvent[] = [];
  for await (const m of stream) if (m.event) out.push(m.event);
  return out;
}

export function stdoutOf(events: ProcessEvent[]): string {
  return events
    .map((e) =>
      e.event.case === 'data' && e.event.value.output.case === 'stdout'
        ? Buffer.from(e.event.value.output.value).toString()
        : '',
    )
    .join('');
}

/** `it` arguments of a case that needs features: skipped (and saying why) where they are missing. */
export function lacks(features: ReadonlySet<Feature>, ...needed: Feature[]): boolean {
  return needed.some((f) => !features.has(f));
}
