/** A sandbox's lifecycle state as the node's orchestrator names it. */
export type SandboxState =
  'creating' | 'resuming' | 'running' | 'snapshotting' | 'forking' | 'pausing' | 'paused' | 'killing';

/** What the proxy needs to know about a sandbox to route and authorise a request. */
export interface ProxyTarget {
  sandboxId: string;
  state: SandboxState;
  secure: boolean;
  allowPublicTraffic: boolean;
  autoResume: boolean;
  /** `network.httpsPorts`: sandbox ports reached over TLS, certificates not verified. */
  httpsPorts?: readonly number[];
  /** `network.maskRequestHost`: the Host the sandbox's services see (`${PORT}`: the port). */
  maskRequestHost?: string;
  /** Present while the sandbox is running on this node. */
  upstream?: { host: string; instanceId: string };
}

/** The proxy's window on the orchestrator. */
export interface SandboxDirectory {
  lookup(sandboxId: string): ProxyTarget | undefined;
  /** Waits for a transitional state to end; resolves with the settled target (or undefined when it is gone). */
  settle(sandboxId: string): Promise<ProxyTarget | undefined>;
  /** Resumes a paused sandbox for a data-plane request (auto-resume); rejects with AutoResumeTimeout on timeout. */
  autoResume(sandboxId: string): Promise<ProxyTarget>;
  /** A sandbox this node does not hold, taken over from a shared repository (docs/cluster.md); may throw NotFound. */
  adopt?(sandboxId: string): Promise<ProxyTarget | undefined>;
  verifyEnvdToken(sandboxId: string, token: string): boolean;
  verifyTrafficToken(sandboxId: string, token: string): boolean;
  /** Whether this sandbox's envd accepts the signed `/files` URL (request target) within the node's limits. */
  verifyFilesSignature(sandboxId: string, url: string, method: string): boolean;
  /**
   * The running sandbox whose envd accepts this signed `/files` URL, if any. May throw
   * SignedUrlBudgetExceeded (answered 429) when too many new URLs arrive at once.
   */
  findBySignedFilesUrl(url: string, method: string): string | undefined;
}

export class AutoResumeTimeout extends Error {
  constructor(sandboxId: string) {
    super(`sandbox ${sandboxId} auto-resume timed out`);
  }
}
