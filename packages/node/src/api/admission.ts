// Admission limits: what one API caller may ask of this node (`[limits]`, docs/security.md "Admission
// limits"). Checked before the route handlers of the routes that create something, so a request above a limit
// changes nothing; the answer is a 4xx naming the config key.
import { availableParallelism, totalmem } from 'node:os';
import type { FastifyInstance, RouteHandlerMethod } from 'fastify';
import type { AenvConfig } from '@aenv/config';
import type { LaunchableTemplate, TemplateLookup } from '../orchestrator/orchestrator.js';
import { ApiError } from './errors.js';

export interface AdmissionLimits {
  maxCpuCount: number;
  maxMemoryMB: number;
  maxDiskSizeMB: number;
  maxMetadataEntries: number;
  maxMetadataBytes: number;
  maxEnvVars: number;
  maxEnvVarBytes: number;
  maxEnvVarsBytes: number;
  maxBuildSteps: number;
  maxForkCount: number;
  maxConcurrentCreates: number;
}

/** `[limits]` with its zeros ("the host's") resolved against this host. */
export function admissionLimitsFrom(
  config: AenvConfig,
  host = { cpus: availableParallelism(), memoryMB: Math.floor(totalmem() / 1024 ** 2) },
): AdmissionLimits {
  const l = config.limits;
  return {
    maxCpuCount: l.max_cpu_count || Math.max(host.cpus, config.machine.vcpu_count),
    maxMemoryMB: l.max_memory_mb || Math.max(host.memoryMB, config.machine.mem_size_mib),
    maxDiskSizeMB: l.max_disk_size_mb,
    maxMetadataEntries: l.max_metadata_entries,
    maxMetadataBytes: l.max_metadata_bytes,
    maxEnvVars: l.max_env_vars,
    maxEnvVarBytes: l.max_env_var_bytes,
    maxEnvVarsBytes: l.max_env_vars_bytes,
    maxBuildSteps: l.max_build_steps,
    maxForkCount: l.max_fork_count,
    maxConcurrentCreates: l.max_concurrent_creates,
  };
}

const isRecord = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

const bytes = (s: string) => Buffer.byteLength(s, 'utf8');

/** Applies the limits; the route checks below and `withResourceLimits` call it. */
export class AdmissionControl {
  private creating = 0;

  constructor(readonly limits: AdmissionLimits) {}

  /** Resources of a template build, or of the template or snapshot a sandbox starts from. */
  checkResources(r: { cpuCount?: unknown; memoryMB?: unknown; diskSizeMB?: unknown }, what: string): void {
    const over = (field: string, value: unknown, max: number, key: string) => {
      if (typeof value === 'number' && value > max)
        throw new ApiError(
          400,
          `${what}: ${field} ${value} is above this node's limit of ${max} (limits.${key})`,
        );
    };
    over('cpuCount', r.cpuCount, this.limits.maxCpuCount, 'max_cpu_count');
    over('memoryMB', r.memoryMB, this.limits.maxMemoryMB, 'max_memory_mb');
    over('diskSizeMB', r.diskSizeMB, this.limits.maxDiskSizeMB, 'max_disk_size_mb');
  }

  checkMetadata(metadata: unknown): void {
    if (!isRecord(metadata)) return; // the route's schema names a wrong type
    const entries = Object.entries(metadata);
    if (entries.length > this.limits.maxMetadataEntries) {
      throw new ApiError(
        400,
        `metadata has ${entries.length} entries; this node allows ${this.limits.maxMetadataEntries} (limits.max_metadata_entries)`,
      );
    }
    let total = 0;
    for (const [k, v] of entries) total += bytes(k) + (typeof v === 'string' ? bytes(v) : 0);
    if (total > this.limits.maxMetadataBytes) {
      throw new ApiError(
        400,
        `metadata is ${total} bytes; this node allows ${this.limits.maxMetadataBytes} (limits.max_metadata_bytes)`,
      );
    }
  }

  /** The create request's envVars: every command of the sandbox is started with them. */
  checkEnvVars(envVars: unknown): void {
    if (!isRecord(envVars)) return;
    const entries = Object.entries(envVars);
    if (entries.length > this.limits.maxEnvVars) {
      throw new ApiError(
        400,
        `envVars has ${entries.length} entries; this node allows ${this.limits.maxEnvVars} (limits.max_env_vars)`,
      );
    }
    let total = 0;
    for (const [k, v] of entries) {
      if (typeof v !== 'string') continue;
      total += this.checkEnvEntry(k, v, 'envVars');
    }
    if (total > this.limits.maxEnvVarsBytes) {
      throw new ApiError(
        400,
        `envVars are ${total} bytes; this node allows ${this.limits.maxEnvVarsBytes} (limits.max_env_vars_bytes)`,
      );
    }
  }

  /** One `KEY=value`: a name a process environment can hold, and a string execve accepts. Returns its size. */
  private checkEnvEntry(key: string, value: string, where: string): number {
    if (key === '' || key.includes('=') || key.includes('\0'))
      throw new ApiError(
        400,
        `${where}: invalid variable name ${JSON.stringify(key)}: must be non-empty, without '=' or NUL`,
      );
    if (value.includes('\0'))
      throw new ApiError(400, `${where}: the value of ${key} contains a NUL character`);
    const size = bytes(key) + 1 + bytes(value);
    if (size > this.limits.maxEnvVarBytes) {
      throw new ApiError(
        400,
        `${where}: ${key} is ${size} bytes; this node allows ${this.limits.maxEnvVarBytes} per variable (limits.max_env_var_bytes)`,
      );
    }
    return size;
  }

  /** A template build's steps: how many, and the variables its ENV/ARG steps set. */
  checkBuildSteps(steps: unknown): void {
    if (!Array.isArray(steps)) return;
    if (steps.length > this.limits.maxBuildSteps) {
      throw new ApiError(
        400,
        `the build has ${steps.length} steps; this node allows ${this.limits.maxBuildSteps} (limits.max_build_steps)`,
      );
    }
    steps.forEach((step: unknown, i) => {
      if (!isRecord(step) || typeof step.type !== 'string' || !Array.isArray(step.args)) return;
      const type = step.type.toUpperCase();
      if (type !== 'ENV' && type !== 'ARG') return;
      const args = step.args as unknown[];
      for (let a = 0; a + 1 < args.length; a += 2) {
        const [k, v] = [args[a], args[a + 1]];
        if (typeof k === 'string' && typeof v === 'string') this.checkEnvEntry(k, v, `steps[${i}] (${type})`);
      }
    });
  }

  checkForkCount(count: unknown): void {
    if (typeof count === 'number' && count > this.limits.maxForkCount) {
      throw new ApiError(
        400,
        `fork count ${count} is above this node's limit of ${this.limits.maxForkCount} (limits.max_fork_count)`,
      );
    }
  }

  /** Takes `n` create slots, or answers 429 when they are not free; returns the release. */
  startCreates(n: number): () => void {
    const max = this.limits.maxConcurrentCreates;
    if (this.creating + n > max) {
      throw new ApiError(
        429,
        `this node is already starting ${this.creating} sandbox${this.creating === 1 ? '' : 'es'} (limit ${max}, limits.max_concurrent_creates); retry later`,
      );
    }
    this.creating += n;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.creating -= n;
    };
  }
}

/** The template a sandbox starts from must fit the node's resource limits (it may come from a shared bucket). */
export function withResourceLimits(lookup: TemplateLookup, control: AdmissionControl): TemplateLookup {
  return {
    async resolveLaunchable(ref: string): Promise<LaunchableTemplate> {
      const t = await lookup.resolveLaunchable(ref);
      control.checkResources(t.resources, `template ${ref}`);
      return t;
    },
  };
}

const body = (b: unknown): Record<string, unknown> => (isRecord(b) ? b : {});
const forkCount = (b: unknown): number => {
  const c = body(b).count;
  return typeof c === 'number' && Number.isInteger(c) && c >= 1 ? c : 1;
};

/** What is checked before each guarded route, and how many create slots it holds while it runs. */
interface Guard {
  check(control: AdmissionControl, reqBody: unknown): void;
  slots?(reqBody: unknown): number;
}

const GUARDS: Record<string, Guard> = {
  'POST /sandboxes': {
    check: (c, b) => (c.checkMetadata(body(b).metadata), c.checkEnvVars(body(b).envVars)),
    slots: () => 1,
  },
  'POST /v2/sandboxes': {
    check: (c, b) => (c.checkMetadata(body(b).metadata), c.checkEnvVars(body(b).envVars)),
    slots: () => 1,
  },
  'POST /sandboxes-cold': {
    check: (c, b) => {
      c.checkMetadata(body(b).metadata);
      c.checkEnvVars(body(b).envVars);
      const { cpuCount, memoryMB, diskSizeMB } = body(b);
      c.checkResources({ cpuCount, memoryMB, diskSizeMB }, 'cold sandbox request');
    },
    slots: () => 1,
  },
  'POST /sandboxes/:id/fork': {
    check: (c, b) => c.checkForkCount(body(b).count),
    slots: forkCount,
  },
  'POST /v3/templates': {
    check: (c, b) =>
      c.checkResources({ cpuCount: body(b).cpuCount, memoryMB: body(b).memoryMB }, 'template build request'),
  },
  'POST /v2/templates/:templateID/builds/:buildID': {
    check: (c, b) => c.checkBuildSteps(body(b).steps),
  },
};

/**
 * Puts the admission checks in front of the guarded routes (register before the routes). Fails at startup when
 * a guarded route was never registered, so a renamed route cannot silently lose its limits.
 */
export function registerAdmission(app: FastifyInstance, control: AdmissionControl): void {
  const seen = new Set<string>();
  app.addHook('onRoute', (route) => {
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    for (const method of methods) {
      const name = `${method} ${route.url}`;
      const guard = GUARDS[name];
      if (!guard) continue;
      seen.add(name);
      const handler = route.handler as RouteHandlerMethod;
      route.handler = async function (this: FastifyInstance, req, reply) {
        guard.check(control, req.body);
        let release = () => {};
        try {
          if (guard.slots) release = control.startCreates(guard.slots(req.body));
        } catch (e) {
          void reply.header('retry-after', '1');
          throw e;
        }
        try {
          return await handler.call(this, req, reply);
        } finally {
          release();
        }
      } as RouteHandlerMethod;
    }
  });
  app.addHook('onReady', async () => {
    const missing = Object.keys(GUARDS).filter((n) => !seen.has(n));
    if (missing.length) throw new Error(`admission limits: routes not registered: ${missing.join(', ')}`);
  });
}
