// A loopback HTTP proxy in front of a test registry: counts requests per "METHOD path" and injects faults
// (an HTTP status, or a connection reset in the middle of a body) for the next N matching requests.
// Not used by the server itself.

import { createServer, request, type Server } from 'node:http';

export interface Fault {
  match: RegExp;
  times: number;
  kind: { status: number } | 'reset-mid-body';
}

export interface CountingProxy {
  host: string;
  url: string;
  counts: Map<string, number>;
  count(re: RegExp): number;
  inject(f: Fault): void;
  reset(): void;
  stop(): Promise<void>;
}

export async function startCountingProxy(upstream: string): Promise<CountingProxy> {
  const target = new URL(upstream);
  const counts = new Map<string, number>();
  const faults: Fault[] = [];
  const server: Server = createServer((req, res) => {
    const key = `${req.method} ${req.url?.split('?')[0]}`;
    counts.set(key, (counts.get(key) ?? 0) + 1);
    const fault = faults.find((f) => f.times > 0 && f.match.test(key));
    if (fault) fault.times--;
    if (fault && fault.kind !== 'reset-mid-body') {
      res
        .writeHead(fault.kind.status, { 'content-type': 'application/json' })
        .end('{"errors":[{"code":"UNAVAILABLE"}]}');
      req.resume();
      return;
    }
    const up = request(
      {
        host: target.hostname,
        port: target.port,
        method: req.method,
        path: req.url,
        headers: { ...req.headers, host: target.host },
      },
      (upRes) => {
        res.writeHead(upRes.statusCode ?? 502, upRes.headers);
        if (fault) {
          // Send part of the body, then drop the connection.
          upRes.once('data', (chunk: Buffer) => {
            res.write(chunk.subarray(0, Math.max(1, chunk.length >> 1)), () => res.socket?.destroy());
            upRes.destroy();
          });
          return;
        }
        upRes.pipe(res);
      },
    );
    up.on('error', () => res.destroy());
    req.pipe(up);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const addr = server.address();
  const port = typeof addr === 'object' && addr ? addr.port : 0;
  return {
    host: `127.0.0.1:${port}`,
    url: `http://127.0.0.1:${port}`,
    counts,
    count: (re) => [...counts].filter(([k]) => re.test(k)).reduce((s, [, n]) => s + n, 0),
    inject: (f) => faults.push({ ...f }),
    reset: () => {
      counts.clear();
      faults.length = 0;
    },
    stop: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
