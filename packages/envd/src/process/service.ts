import { create } from '@bufbuild/protobuf';
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from '@connectrpc/connect';
import type { Process } from '@aenv/protocol/envd';
import {
  ProcessEventSchema,
  Signal,
  type ProcessEvent,
  type ProcessSelector,
  type StreamInputRequest,
} from '@aenv/protocol/envd';
import { isDirectoryAs, processEnv, rpcUser, type EnvdContext } from '../context.js';
import { KEEPALIVE, keepaliveIntervalMs, type EventQueue } from '../event-queue.js';
import { PathError, resolveUserPath } from '../fs/paths.js';
import type { ExitStatus } from './exit-status.js';
import { ProcessStartError, type ProcessManager } from './manager.js';
import { StdinError, type ManagedProcess, type ProcessOutput } from './managed-process.js';

function selectorOf(s: ProcessSelector | undefined): { pid?: number; tag?: string } {
  if (s?.selector.case === 'pid') return { pid: s.selector.value };
  if (s?.selector.case === 'tag') return { tag: s.selector.value };
  throw new ConnectError('process selector (pid or tag) is required', Code.InvalidArgument);
}

function describe(sel: { pid?: number; tag?: string }): string {
  return sel.tag !== undefined ? `process with tag ${sel.tag}` : `process with pid ${sel.pid}`;
}

function endEvent(status: ExitStatus): ProcessEvent {
  return create(ProcessEventSchema, { event: { case: 'end', value: status } });
}

function toEvent(out: ProcessOutput | typeof KEEPALIVE): ProcessEvent {
  if (out === KEEPALIVE) return create(ProcessEventSchema, { event: { case: 'keepalive', value: {} } });
  if (out.kind === 'end') return endEvent(out.status);
  return create(ProcessEventSchema, {
    event: { case: 'data', value: { output: { case: out.stream, value: out.bytes } } },
  });
}

function stdinError(err: unknown): never {
  if (err instanceof StdinError) throw new ConnectError(err.message, Code.FailedPrecondition);
  throw err;
}

/** The `process.Process` service. */
export function processService(
  ctx: EnvdContext,
  manager: ProcessManager,
): Partial<ServiceImpl<typeof Process>> {
  function running(sel: { pid?: number; tag?: string }): ManagedProcess {
    const proc = manager.find(sel);
    if (!proc) throw new ConnectError(`${describe(sel)} not found`, Code.NotFound);
    return proc;
  }

  async function* follow(proc: ManagedProcess, events: EventQueue<ProcessOutput>, hctx: HandlerContext) {
    try {
      yield { event: create(ProcessEventSchema, { event: { case: 'start', value: { pid: proc.pid } } }) };
      const keepalive = keepaliveIntervalMs(hctx.requestHeader.get('keepalive-ping-interval'));
      for await (const out of events.drain(hctx.signal, keepalive)) yield { event: toEvent(out) };
    } finally {
      // The stream ended (or the client went away): detach, but never kill the process.
      proc.unsubscribe(events);
    }
  }

  return {
    async *start(req, hctx) {
      const user = rpcUser(ctx, hctx.requestHeader);
      const cfg = req.process;
      if (!cfg?.cmd) throw new ConnectError('process.cmd is required', Code.InvalidArgument);
      let cwd: string;
      try {
        cwd = resolveUserPath(cfg.cwd ?? '', user, ctx.state.defaultWorkdir);
      } catch (err) {
        if (err instanceof PathError) throw new ConnectError(err.message, Code.InvalidArgument);
        throw err;
      }
      if (!isDirectoryAs(ctx, user, cwd))
        throw new ConnectError(`cwd '${cwd}' does not exist`, Code.InvalidArgument);
      const size = req.pty?.size;
      let started;
      try {
        started = await manager.start({
          config: { cmd: cfg.cmd, args: [...cfg.args], envs: { ...cfg.envs }, cwd: cfg.cwd },
          cwd,
          env: processEnv(ctx, user, cfg.envs),
          user,
          tag: req.tag,
          stdin: req.stdin !== false,
          pty: req.pty ? { cols: size?.cols || 80, rows: size?.rows || 24 } : undefined,
          timeoutMs: hctx.timeoutMs(),
        });
      } catch (err) {
        if (err instanceof ProcessStartError) throw new ConnectError(err.message, Code.Internal);
        throw err;
      }
      yield* follow(started.proc, started.events, hctx);
    },

    async *connect(req, hctx) {
      rpcUser(ctx, hctx.requestHeader);
      const sel = selectorOf(req.process);
      const proc = manager.find(sel);
      if (proc) {
        yield* follow(proc, proc.subscribe(), hctx);
        return;
      }
      const done = manager.recentExit(sel);
      if (!done) throw new ConnectError(`${describe(sel)} not found`, Code.NotFound);
      yield { event: create(ProcessEventSchema, { event: { case: 'start', value: { pid: done.pid } } }) };
      yield { event: endEvent(done.status) };
    },

    list(_req, hctx) {
      rpcUser(ctx, hctx.requestHeader);
      return {
        processes: manager.list().map((p) => ({
          pid: p.pid,
          tag: p.tag,
          config: { cmd: p.config.cmd, args: p.config.args, envs: p.config.envs, cwd: p.config.cwd },
        })),
      };
    },

    async sendInput(req, hctx) {
      rpcUser(ctx, hctx.requestHeader);
      const proc = running(selectorOf(req.process));
      const input = req.input?.input;
      try {
        if (input?.case === 'stdin') await proc.writeStdin(Buffer.from(input.value));
        else if (input?.case === 'pty') proc.writePty(Buffer.from(input.value));
        else throw new ConnectError('input (stdin or pty) is required', Code.InvalidArgument);
      } catch (err) {
        stdinError(err);
      }
      return {};
    },

    async streamInput(reqs: AsyncIterable<StreamInputRequest>, hctx) {
      rpcUser(ctx, hctx.requestHeader);
      let proc: ManagedProcess | undefined;
      for await (const req of reqs) {
        const ev = req.event;
        if (ev.case === 'start') {
          proc = running(selectorOf(ev.value.process));
        } else if (ev.case === 'data') {
          if (!proc)
            throw new ConnectError(
              'the first StreamInput message must be a start event',
              Code.FailedPrecondition,
            );
          const input = ev.value.input?.input;
          try {
            if (input?.case === 'stdin') await proc.writeStdin(Buffer.from(input.value));
            else if (input?.case === 'pty') proc.writePty(Buffer.from(input.value));
          } catch (err) {
            stdinError(err);
          }
        }
      }
      return {};
    },

    closeStdin(req, hctx) {
      rpcUser(ctx, hctx.requestHeader);
      const proc = running(selectorOf(req.process));
      try {
        proc.closeStdin();
      } catch (err) {
        stdinError(err);
      }
      return {};
    },

    sendSignal(req, hctx) {
      rpcUser(ctx, hctx.requestHeader);
      const proc = running(selectorOf(req.process));
      if (req.signal === Signal.SIGKILL) proc.signal('SIGKILL');
      else if (req.signal === Signal.SIGTERM) proc.signal('SIGTERM');
      else throw new ConnectError(`invalid signal: ${req.signal}`, Code.Unimplemented);
      return {};
    },

    update(req, hctx) {
      rpcUser(ctx, hctx.requestHeader);
      const proc = running(selectorOf(req.process));
      const size = req.pty?.size;
      if (size) {
        if (!size.cols || !size.rows)
          throw new ConnectError('pty size needs cols and rows > 0', Code.InvalidArgument);
        try {
          proc.resize(size.cols, size.rows);
        } catch (err) {
          stdinError(err);
        }
      }
      return {};
    },
  };
}
