// What the conformance suite runs against. A target is an implementation of aenv's wire contract (a standalone
// envd, a node, later a gateway); it says which optional parts of the contract it exposes (`features`) and
// makes the sandboxes the cases ask for. Cases that need a feature a target lacks are skipped on it.
import type { Sandbox } from 'e2b';

export type Feature =
  /** The test may POST /init to envd itself (a node keeps /init to itself, docs/security.md "envd /init"). */
  | 'envd-init'
  /** envd's own access-token rules answer (no proxy in front that checks the token first). */
  | 'envd-auth'
  /** HTTP/2 without TLS (h2c) reaches envd. */
  | 'h2c'
  /** A bare URL, without routing headers, reaches envd: unsigned download and upload URLs work. */
  | 'bare-urls'
  /**
   * Isolated sandboxes run envd's test rootfs (packages/envd/src/testing/rootfs.ts): `user` also in groups 27
   * and 2000, hostname `sandbox`, a 256 KiB tmpfs at /small.
   */
  | 'test-rootfs'
  /** An aenv control plane (the E2B API) in front: `controlPlane()` works. */
  | 'control-plane';

/** The kind of sandbox a group of cases runs in. A target makes one per profile name and shares it. */
export interface SandboxProfile {
  name: string;
  /** An envd access token is required (a secure sandbox). */
  secure: boolean;
  /** What every process gets in its environment (/init `envVars`, a node's create `envVars`). */
  envVars: Record<string, string>;
  /**
   * A sandbox of its own, with users root and `user` (1000, home /home/user), `user` the default: envd as the
   * child of aenv-init in its own root, or a node's sandbox. Otherwise an envd target may run envd as root on
   * the test host with a temporary default workdir (cheaper, as the envd tests always have).
   */
  isolated: boolean;
}

export interface TargetSandbox {
  /** Base URL of requests to this sandbox's envd. */
  url: string;
  /** Headers that route a request sent to `url` to this envd (empty when `url` is envd's own). */
  routing: Record<string, string>;
  /** The envd access token of a secure profile. */
  accessToken?: string;
  /** Where processes start when a request names no cwd. */
  workdir: string;
  /** What `E2B_SANDBOX_ID` and `E2B_TEMPLATE_ID` are inside. */
  sandboxId: string;
  templateId: string;
  /** An e2b SDK Sandbox bound to this envd the way `Sandbox.create` binds one (with the token, unless not). */
  sdk(opts?: { withoutToken?: boolean }): Sandbox;
  /** What envd (or the node) logged, for a failing case's report. */
  logs?(): string;
}

export interface ControlPlane {
  /** Base URL of the API. */
  url: string;
  apiKey: string;
  /** The template the target's sandboxes are made from (`base` on a node). */
  template: string;
}

export interface ConformanceTarget {
  /** `envd`, `node`, `gateway`: shows in the suite's names. */
  readonly name: string;
  readonly features: ReadonlySet<Feature>;
  /** The sandbox of `profile`, made on first use. */
  sandbox(profile: SandboxProfile): Promise<TargetSandbox>;
  /** The control plane, for targets with the `control-plane` feature. */
  controlPlane(): Promise<ControlPlane>;
}
