import { request } from 'node:http';
import { ACCESS_TOKEN_HEADER } from '@aenv/protocol';
import type { SandboxLogLevel, SandboxLogLine } from './sandbox-log-store.js';

/** Where aenv-init and envd write inside every sandbox (`AENV_INIT_LOG`, see docs/operations.md). */
export const ENVD_LOG_PATH = '/run/agentenv/envd.log';

export interface EnvdLogSource {
  host: string;
  port: number;
  /** The sandbox's envd access token, when it has one. */
  accessToken?: string;
  /** Only the last `maxBytes` of the file are read (aenv-init empties it past 4 MiB). */
  maxBytes: number;
  timeoutMs: number;
}

/**
 * The tail of the sandbox's envd log, read through envd (as root) so that the sandbox's own view of its files
 * applies: reading its disk from the host would follow links the sandbox planted. Empty when there is none.
 * The sandbox controls envd, so the answer is bounded in size and time and never trusted beyond being text.
 */
export function fetchEnvdLog(src: EnvdLogSource): Promise<{ text: string; truncated: boolean }> {
  const path = `/files?path=${encodeURIComponent(ENVD_LOG_PATH)}&username=root`;
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: src.host,
        port: src.port,
        method: 'GET',
        path,
        agent: false,
        timeout: src.timeoutMs,
        headers: {
          range: `bytes=-${src.maxBytes}`,
          'accept-encoding': 'identity',
          ...(src.accessToken ? { [ACCESS_TOKEN_HEADER]: src.accessToken } : {}),
        },
      },
      (res) => {
        if (res.statusCode !== 200 && res.statusCode !== 206) {
          res.resume();
          // No log yet (404), an empty one (416), or envd refusing: no envd lines.
          resolve({ text: '', truncated: false });
          return;
        }
        const range = /^bytes (\d+)-/.exec(String(res.headers['content-range'] ?? ''));
        const truncated = res.statusCode === 206 && range !== null && Number(range[1]) > 0;
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (c: Buffer) => {
          size += c.length;
          if (size > src.maxBytes) {
            const err = new Error(`envd sent more than the ${src.maxBytes} bytes asked for`);
            reject(err);
            req.destroy(err);
            return;
          }
          chunks.push(c);
        });
        res.on('end', () => resolve({ text: Buffer.concat(chunks).toString('utf8'), truncated }));
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error(`envd log read timed out after ${src.timeoutMs} ms`)));
    req.on('error', reject);
    req.end();
  });
}

const LEVELS = new Set<SandboxLogLevel>(['debug', 'info', 'warn', 'error']);
const MAX_MESSAGE = 4096;
const MAX_FIELDS = 32;

function text(v: unknown): string {
  const s = typeof v === 'string' ? v : (JSON.stringify(v) ?? String(v));
  return s.length > MAX_MESSAGE ? `${s.slice(0, MAX_MESSAGE)}…` : s;
}

/**
 * Lines of the envd log: envd's JSON lines (`{t, level, msg, ...fields}`) keep their time and level; other
 * lines (aenv-init, a crashing envd) get the time of the line before them. Lines older than `sinceMs` are
 * dropped: a sandbox started from a snapshot or fork carries the log of the sandbox it was taken from.
 * A first line cut by the tail read is dropped too.
 */
export function parseEnvdLog(raw: string, sinceMs: number, truncated: boolean): SandboxLogLine[] {
  const lines = raw.split('\n');
  if (truncated) lines.shift();
  const out: SandboxLogLine[] = [];
  let lastTs: number | undefined;
  for (const line of lines) {
    if (!line.trim()) continue;
    let parsed: Record<string, unknown> | undefined;
    if (line.startsWith('{')) {
      try {
        const v = JSON.parse(line) as unknown;
        if (v && typeof v === 'object' && !Array.isArray(v)) parsed = v as Record<string, unknown>;
      } catch {
        // not JSON after all: kept as plain text
      }
    }
    const ts = parsed && typeof parsed.t === 'string' ? Date.parse(parsed.t) : NaN;
    if (!Number.isNaN(ts)) lastTs = ts;
    if (lastTs === undefined || lastTs < sinceMs) continue;
    if (!parsed || Number.isNaN(ts)) {
      out.push({ timestampMs: lastTs, level: 'info', logger: 'aenv-init', message: text(line), fields: {} });
      continue;
    }
    const { t: _t, level, msg, ...rest } = parsed;
    const fields: Record<string, string> = {};
    for (const [k, v] of Object.entries(rest).slice(0, MAX_FIELDS)) fields[text(k)] = text(v);
    out.push({
      timestampMs: ts,
      level: LEVELS.has(level as SandboxLogLevel) ? (level as SandboxLogLevel) : 'info',
      logger: 'envd',
      message: text(msg ?? ''),
      fields,
    });
  }
  return out;
}
