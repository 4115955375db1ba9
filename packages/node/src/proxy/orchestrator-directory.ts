import type { Orchestrator } from '../orchestrator/orchestrator.js';
import { autoResumable, type SandboxRecord } from '../orchestrator/types.js';
import type { SandboxTokenIssuer } from '../secrets/index.js';
import {
  AutoResumeTimeout,
  parseSignedFiles,
  SignedUrlRouter,
  type ProxyTarget,
  type SandboxDirectory,
  type SigningCandidate,
} from '@aenv/proxy';

function target(r: SandboxRecord): ProxyTarget {
  return {
    sandboxId: r.id,
    state: r.state,
    secure: r.secure,
    allowPublicTraffic: r.network.allowPublicTraffic,
    autoResume: autoResumable(r),
    ...(r.network.httpsPorts ? { httpsPorts: r.network.httpsPorts } : {}),
    ...(r.network.maskRequestHost !== undefined ? { maskRequestHost: r.network.maskRequestHost } : {}),
    ...(r.runtime
      ? { upstream: { host: r.runtime.hostInteractionIp, instanceId: r.runtime.instanceId } }
      : {}),
  };
}

export interface OrchestratorDirectoryOptions {
  autoResumeWaitMs?: number;
  /** `[sandbox_proxy].signed_url_max_lifetime_secs`. */
  signedUrlMaxLifetimeSecs: number;
  /** `[sandbox_proxy].signed_url_scan_hashes_per_sec`. */
  signedUrlScanHashesPerSec: number;
}

/** The proxy's view of the orchestrator. */
export class OrchestratorDirectory implements SandboxDirectory {
  private readonly autoResumeWaitMs: number;
  private readonly signedUrls: SignedUrlRouter;
  /** envd tokens of secure sandboxes, derived once per sandbox instead of once per signed request. */
  private readonly envdTokens = new Map<string, string>();

  constructor(
    private readonly orchestrator: Orchestrator,
    private readonly tokens: SandboxTokenIssuer,
    opts: OrchestratorDirectoryOptions,
  ) {
    this.autoResumeWaitMs = opts.autoResumeWaitMs ?? 60_000;
    this.signedUrls = new SignedUrlRouter({
      maxLifetimeSecs: opts.signedUrlMaxLifetimeSecs,
      hashesPerSec: opts.signedUrlScanHashesPerSec,
    });
  }

  lookup(id: string): ProxyTarget | undefined {
    const r = this.orchestrator.find(id);
    return r && target(r);
  }

  async settle(id: string): Promise<ProxyTarget | undefined> {
    const r = await this.orchestrator.settle(id);
    return r && target(r);
  }

  async adopt(id: string): Promise<ProxyTarget | undefined> {
    const r = await this.orchestrator.adopt(id);
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

  verifyFilesSignature(id: string, url: string, method: string): boolean {
    const signed = parseSignedFiles(url, method);
    const r = this.orchestrator.find(id);
    return !!signed && !!r && r.secure && this.signedUrls.verify(signed, this.candidate(r));
  }

  findBySignedFilesUrl(url: string, method: string): string | undefined {
    const signed = parseSignedFiles(url, method);
    if (!signed) return undefined;
    const running = (r: SandboxRecord | undefined) => !!r && r.secure && r.state === 'running';
    return this.signedUrls.find(
      signed,
      (id) => {
        const r = this.orchestrator.find(id);
        return running(r) ? this.candidate(r!) : undefined;
      },
      () => this.runningSecure(running),
    );
  }

  private candidate(r: SandboxRecord): SigningCandidate {
    let token = this.envdTokens.get(r.id);
    if (token === undefined) {
      token = this.tokens.envd(r.id);
      this.envdTokens.set(r.id, token);
    }
    return { id: r.id, createdAtMs: Date.parse(r.createdAt), token };
  }

  private runningSecure(running: (r: SandboxRecord) => boolean): SigningCandidate[] {
    const all = this.orchestrator.all();
    // Forget the tokens of sandboxes that are gone once they outnumber the live ones.
    if (this.envdTokens.size > 2 * all.length + 64) {
      const live = new Set(all.map((r) => r.id));
      for (const id of this.envdTokens.keys()) if (!live.has(id)) this.envdTokens.delete(id);
    }
    return all.filter(running).map((r) => this.candidate(r));
  }
}
