// envd's Connect RPC below the SDK: both codecs over HTTP/1.1 and h2c, server and client streaming, process
// lifetime rules, watchers, and the exact framing the SDK parses.
import { beforeAll, describe, expect, it } from 'vitest';
import { create } from '@bufbuild/protobuf';
import { Code, ConnectError } from '@connectrpc/connect';
import {
  EventType,
  Signal,
  StreamInputRequestSchema,
  type ProcessEvent,
  type StartResponse,
} from '../../envd/index.js';
import { alive, clients, collect, envdFetch, lacks, q, sh, stdoutOf, until } from '../helpers.js';
import { WIRE } from '../profiles.js';
import type { ConformanceTarget, TargetSandbox } from '../target.js';

export function rpcCases(target: ConformanceTarget): void {
  describe('Connect RPC', () => {
    let sbx: TargetSandbox;
    beforeAll(async () => {
      sbx = await target.sandbox(WIRE);
    });

    for (const [name, opts] of [
      ['binary over HTTP/1.1', { binary: true }],
      ['JSON over HTTP/1.1', { binary: false }],
      ['JSON over h2c', { binary: false, http2: true }],
      ['binary over h2c', { binary: true, http2: true }],
    ] as const) {
      it.skipIf('http2' in opts && lacks(target.features, 'h2c'))(
        `starts a process and streams start, data and end events (${name})`,
        async () => {
          const { process: proc } = clients(sbx, opts);
          const events = await collect(
            proc.start({
              process: {
                cmd: '/bin/sh',
                args: ['-c', 'echo "$FROM_INIT $X"; pwd; exit 2'],
                envs: { X: 'y' },
              },
              stdin: false,
            }),
          );
          expect(events[0]?.event.case).toBe('start');
          const pid = events[0]?.event.case === 'start' ? events[0].event.value.pid : 0;
          expect(pid).toBeGreaterThan(1);
          expect(stdoutOf(events)).toBe(`1 y\n${sbx.workdir}\n`);
          const end = events.at(-1);
          expect(end?.event.case).toBe('end');
          expect(end?.event.value).toMatchObject({
            exitCode: 2,
            exited: true,
            status: 'exit status 2',
            error: 'exit status 2',
          });
        },
      );
    }

    it('splits output into chunks of at most 32 KiB', async () => {
      const { process: proc } = clients(sbx, { binary: true });
      const events = await collect(
        proc.start({ process: { cmd: '/bin/sh', args: ['-c', 'head -c 300000 /dev/zero'] } }),
      );
      const sizes = events
        .filter((e) => e.event.case === 'data')
        .map((e) => (e.event.case === 'data' ? e.event.value.output.value!.length : 0));
      expect(sizes.reduce((a, b) => a + b, 0)).toBe(300_000);
      expect(Math.max(...sizes)).toBeLessThanOrEqual(32 * 1024);
    });

    it('splits PTY output into chunks of at most 16 KiB', async () => {
      const { process: proc } = clients(sbx, { binary: true });
      const events = await collect(
        proc.start({
          process: { cmd: '/bin/sh', args: ['-c', 'head -c 100000 /dev/zero | tr "\\0" x'] },
          pty: { size: { cols: 80, rows: 24 } },
        }),
      );
      const sizes = events
        .filter((e) => e.event.case === 'data' && e.event.value.output.case === 'pty')
        .map((e) => (e.event.case === 'data' ? e.event.value.output.value!.length : 0));
      expect(sizes.reduce((a, b) => a + b, 0)).toBeGreaterThanOrEqual(100_000);
      expect(Math.max(...sizes)).toBeLessThanOrEqual(16 * 1024);
    });

    it('lists processes with config and tag, connects by tag, and ends them with SIGTERM', async () => {
      const { process: proc } = clients(sbx, { binary: false });
      const stream = proc.start(
        { process: { cmd: 'sleep', args: ['30'], envs: { A: 'b' }, cwd: '/tmp' }, tag: 'sleeper' },
        { timeoutMs: 0 },
      );
      const it = stream[Symbol.asyncIterator]();
      const first = (await it.next()).value as StartResponse;
      const pid = first.event?.event.case === 'start' ? first.event.event.value.pid : 0;
      const listed = (await proc.list({})).processes.find((p) => p.pid === pid);
      expect(listed).toMatchObject({
        tag: 'sleeper',
        config: { cmd: 'sleep', args: ['30'], envs: { A: 'b' }, cwd: '/tmp' },
      });

      const connected = proc.connect({ process: { selector: { case: 'tag', value: 'sleeper' } } });
      await proc.sendSignal({
        process: { selector: { case: 'tag', value: 'sleeper' } },
        signal: Signal.SIGTERM,
      });
      const viaConnect = await collect(connected);
      expect(viaConnect[0]?.event).toMatchObject({ case: 'start', value: { pid } });
      expect(viaConnect.at(-1)?.event.value).toMatchObject({
        exitCode: -1,
        exited: false,
        status: 'signal: terminated',
      });
      const rest: ProcessEvent[] = [];
      for (let r = await it.next(); !r.done; r = await it.next()) if (r.value.event) rest.push(r.value.event);
      expect(rest.at(-1)?.event.case).toBe('end');
    });

    it('rejects unknown pids and unsupported signals', async () => {
      const { process: proc } = clients(sbx, { binary: true });
      const missing = await proc
        .sendSignal({ process: { selector: { case: 'pid', value: 999_999 } }, signal: Signal.SIGKILL })
        .catch((e: unknown) => e);
      expect(ConnectError.from(missing).code).toBe(Code.NotFound);
      expect(ConnectError.from(missing).rawMessage).toBe('process with pid 999999 not found');
      const stream = proc.start({ process: { cmd: 'sleep', args: ['10'] } });
      const it = stream[Symbol.asyncIterator]();
      const first = (await it.next()).value as StartResponse;
      const pid = first.event?.event.case === 'start' ? first.event.event.value.pid : 0;
      const bad = await proc
        .sendSignal({ process: { selector: { case: 'pid', value: pid } }, signal: Signal.UNSPECIFIED })
        .catch((e: unknown) => e);
      expect(ConnectError.from(bad).code).toBe(Code.Unimplemented);
      await proc.sendSignal({ process: { selector: { case: 'pid', value: pid } }, signal: Signal.SIGKILL });
      for (let r = await it.next(); !r.done; r = await it.next()) void r;
    });

    for (const http2 of [false, true]) {
      it.skipIf(http2 && lacks(target.features, 'h2c'))(
        `takes stdin through client-streaming StreamInput (${http2 ? 'h2c' : 'HTTP/1.1'})`,
        async () => {
          const { process: proc } = clients(sbx, { binary: true, http2 });
          const tag = `cat-${http2}`;
          const events = collect(proc.start({ process: { cmd: 'cat', args: [] }, tag, stdin: true }));
          await until(() => proc.list({}).then((l) => l.processes.some((p) => p.tag === tag)));
          async function* input() {
            yield create(StreamInputRequestSchema, {
              event: { case: 'start', value: { process: { selector: { case: 'tag', value: tag } } } },
            });
            for (const part of ['one ', 'two ', 'three\n']) {
              yield create(StreamInputRequestSchema, {
                event: {
                  case: 'data',
                  value: { input: { input: { case: 'stdin', value: Buffer.from(part) } } },
                },
              });
            }
            yield create(StreamInputRequestSchema, { event: { case: 'keepalive', value: {} } });
          }
          await proc.streamInput(input());
          await proc.closeStdin({ process: { selector: { case: 'tag', value: tag } } });
          expect(stdoutOf(await events)).toBe('one two three\n');
        },
      );
    }

    it('opens a stdin pipe when stdin is unset (old SDKs) and /dev/null when false', async () => {
      const { process: proc } = clients(sbx, { binary: false });
      const events = collect(proc.start({ process: { cmd: 'cat', args: [] }, tag: 'legacy' }));
      await until(() => proc.list({}).then((l) => l.processes.some((p) => p.tag === 'legacy')));
      await proc.sendInput({
        process: { selector: { case: 'tag', value: 'legacy' } },
        input: { input: { case: 'stdin', value: Buffer.from('piped\n') } },
      });
      await proc.closeStdin({ process: { selector: { case: 'tag', value: 'legacy' } } });
      expect(stdoutOf(await events)).toBe('piped\n');

      const noStdin = proc.start({ process: { cmd: 'sleep', args: ['5'] }, tag: 'nostdin', stdin: false });
      const it = noStdin[Symbol.asyncIterator]();
      await it.next();
      const err = await proc
        .sendInput({
          process: { selector: { case: 'tag', value: 'nostdin' } },
          input: { input: { case: 'stdin', value: Buffer.from('x') } },
        })
        .catch((e: unknown) => e);
      expect(ConnectError.from(err).code).toBe(Code.FailedPrecondition);
      await proc.sendSignal({
        process: { selector: { case: 'tag', value: 'nostdin' } },
        signal: Signal.SIGKILL,
      });
      for (let r = await it.next(); !r.done; r = await it.next()) void r;
    });

    it('sends keepalive events on idle streams at the requested interval', async () => {
      const { process: proc } = clients(sbx, { binary: true });
      const events = await collect(
        proc.start(
          { process: { cmd: 'sleep', args: ['2.5'] } },
          { headers: { 'keepalive-ping-interval': '1' } },
        ),
      );
      expect(events.filter((e) => e.event.case === 'keepalive').length).toBeGreaterThanOrEqual(1);
      expect(events.at(-1)?.event.case).toBe('end');
    });

    it('kills a process when its Connect-Timeout-Ms passes, but not when the client goes away', async () => {
      const { process: proc } = clients(sbx, { binary: true });
      let pid = 0;
      const err = await (async () => {
        for await (const m of proc.start({ process: { cmd: 'sleep', args: ['30'] } }, { timeoutMs: 800 })) {
          if (m.event?.event.case === 'start') pid = m.event.event.value.pid;
        }
      })().catch((e: unknown) => e);
      expect(ConnectError.from(err).code).toBe(Code.DeadlineExceeded);
      expect(await until(async () => !(await alive(sbx, pid)))).toBe(true);

      const abort = new AbortController();
      let survivor = 0;
      await (async () => {
        for await (const m of proc.start(
          { process: { cmd: 'sleep', args: ['30'] } },
          { signal: abort.signal, timeoutMs: 0 },
        )) {
          if (m.event?.event.case === 'start') {
            survivor = m.event.event.value.pid;
            abort.abort();
          }
        }
      })().catch(() => undefined);
      await new Promise((r) => setTimeout(r, 300));
      expect(await alive(sbx, survivor)).toBe(true);
      await proc.sendSignal({
        process: { selector: { case: 'pid', value: survivor } },
        signal: Signal.SIGKILL,
      });
      expect(await until(async () => !(await alive(sbx, survivor)))).toBe(true);
    });

    it('polls watch events with CreateWatcher / GetWatcherEvents / RemoveWatcher', async () => {
      const { fs } = clients(sbx, { binary: true });
      const dir = `${sbx.workdir}/polled`;
      await sh(sbx, `mkdir -p ${q(`${dir}/sub`)}`);
      const { watcherId } = await fs.createWatcher({ path: dir, recursive: true, includeEntry: true });
      await sh(sbx, `printf x > ${q(`${dir}/sub/f.txt`)}`);
      const seen: { name: string; type: EventType; hasEntry: boolean }[] = [];
      await until(async () => {
        for (const e of (await fs.getWatcherEvents({ watcherId })).events)
          seen.push({ name: e.name, type: e.type, hasEntry: !!e.entry });
        return seen.some((e) => e.name === 'sub/f.txt' && e.type === EventType.WRITE);
      });
      expect(seen).toContainEqual({ name: 'sub/f.txt', type: EventType.CREATE, hasEntry: true });
      expect(seen).toContainEqual({ name: 'sub/f.txt', type: EventType.WRITE, hasEntry: true });
      await fs.removeWatcher({ watcherId });
      const gone = await fs.getWatcherEvents({ watcherId }).catch((e: unknown) => e);
      expect(ConnectError.from(gone).code).toBe(Code.NotFound);
    });

    it('answers unary JSON errors with the Connect error body', async () => {
      const res = await envdFetch(sbx, '/filesystem.Filesystem/Stat', {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'connect-protocol-version': '1' },
        body: JSON.stringify({ path: `${sbx.workdir}/missing` }),
      });
      expect(res.status).toBe(404);
      const body = (await res.json()) as { code: string; message: string };
      expect(body.code).toBe('not_found');
      expect(body.message).toContain('file not found');
    });

    it('frames server-streaming JSON exactly as the SDK parses it', async () => {
      const json = Buffer.from(
        JSON.stringify({ process: { cmd: '/bin/sh', args: ['-c', 'exit 4'] }, stdin: false }),
      );
      const head = Buffer.alloc(5);
      head.writeUInt32BE(json.length, 1);
      const res = await envdFetch(sbx, '/process.Process/Start', {
        method: 'POST',
        headers: { 'content-type': 'application/connect+json', 'connect-protocol-version': '1' },
        body: Buffer.concat([head, json]),
      });
      expect(res.headers.get('content-type')).toBe('application/connect+json');
      const raw = Buffer.from(await res.arrayBuffer());
      const frames: { flags: number; body: unknown }[] = [];
      for (let off = 0; off < raw.length;) {
        const len = raw.readUInt32BE(off + 1);
        frames.push({ flags: raw[off]!, body: JSON.parse(raw.subarray(off + 5, off + 5 + len).toString()) });
        off += 5 + len;
      }
      expect(frames[0]).toMatchObject({ flags: 0, body: { event: { start: { pid: expect.any(Number) } } } });
      expect(frames.at(-2)).toEqual({
        flags: 0,
        body: {
          event: { end: { exitCode: 4, exited: true, status: 'exit status 4', error: 'exit status 4' } },
        },
      });
      expect(frames.at(-1)).toEqual({ flags: 2, body: {} });
    });
  });
}
