// The runtime driver boundary: the orchestrator talks to sandboxes' processes and disks only through this.
// The container driver (runc + CRIU + overlayfs) implements it today; a microVM driver can later.

export interface SandboxResources {
  cpuCount: number;
  memoryMB: number;
  pidsLimit: number;
}

export interface SandboxSpec {
  id: string;
  hostname: string;
  /** Read-only image layer dirs, bottom layer first. */
  lowerDirs: string[];
  resources: SandboxResources;
  /** Network namespace file of the sandbox's slot. */
  netnsPath: string;
  /** Extra lines for the sandbox's /etc/hosts (the driver writes localhost and hostname itself). */
  nameservers: string[];
  /** Environment of the sandbox's init (envd reads its settings from it). */
  initEnv: Record<string, string>;
}

export interface RuntimeInfo {
  /** e.g. "container". Recorded with snapshots: restore only into the same mode. */
  virtualizationMode: string;
  /** Version of the tools mounted at /agentenv (node + envd + init). */
  toolsVersion: string;
}
