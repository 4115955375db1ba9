import { createHash } from 'node:crypto';
import type { Orchestrator } from '../orchestrator/orchestrator.js';
import { autoResumable, type SandboxRecord } from '../orchestrator/types.js';
import type { SandboxTokenIssuer } from '../secrets/index.js';
import { safeEqual } from '../secrets/index.js';
import { AutoResumeTimeout, type ProxyTarget, type SandboxDirectory } from './directory.js';

function target(r: SandboxRecord): ProxyTarget {
  return {
    sandboxId: r.id,
    state: r.state,
    secure: r.secure,
    allowPublicTraffic: r.network.allowPublicTraffic,
    autoResume: autoResumable(r),
    ...(r.runtime
      ? { upstream: { host: r.runtime.hostInteractionIp, instanceId: r.runtime.instanceId } }
      : {}),
  };
}

/** envd's v1 signature of a `/files` URL (e2b-protocol §3.2). */
export function filesSignature(
  path: string,
  op: 'read' | 'write',
  username: string,
  token: string,
  expiration?: string,
): string {
  const text = `${path}:${op}:${username}:${token}${expiration ? `:${expiration}` : ''}`;
  return 'v1_' + createHash('sha256').update(text).digest('base64').replace(/=+$/, '');
}

/** The proxy's view of the orchestrator. */
export class OrchestratorDirectory implements SandboxDirectory {
  constructor(
    private readonly orchestrator: Orchestrator,
    private readonly tokens: SandboxTokenIssuer,
    private readonly autoResumeWaitMs = 60_000,
  ) {}

  lookup(id: string): ProxyTarget | undefined {
    const r = this.orchestrator.find(id);
    return r && target(r);
  }

  async settle(id: string): Promise<ProxyTarget | undefined> {
    const r = await this.orchestrator.settle(id);
    return r && target(r);
  }

  async autoResume(id: string): Promise<ProxyTarget> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new AutoResumeTimeout(id)), this.autoResumeWaitMs);
    });
    try {
      return target(await Promise.race([this.orchestrator.autoResume(id), timeout]));
    } finally {
      clearTimeout(timer);
    }
  }

  verifyEnvdToken(id: string, token: string): boolean {
    return this.tokens.verify('envd', id, token);
  }

  verifyTrafficToken(id: string, token: string): boolean {
    return this.tokens.verify('traffic', id, token);
  }

  findBySignedFilesUrl(url: string, method: string): string | undefined {
    const q = new URL(url, 'http://x').searchParams;
    const signature = q.get('signature');
    const path = q.get('path');
    if (!signature || path === null) return undefined;
    const op = method === 'GET' || method === 'HEAD' ? 'read' : 'write';
    const username = q.get('username') ?? '';
    const expiration = q.get('signature_expiration') ?? undefined;
    for (const r of this.orchestrator.all()) {
      if (!r.secure || r.state !== 'running') continue;
      const expected = filesSignature(path, op, username, this.tokens.envd(r.id), expiration);
      if (safeEqual(expected, signature)) return r.id;
    }
    return undefined;
  }
}
