/** One volume mount of a sandbox, as its record (and a snapshot's capture) keeps it. */
export interface VolumeMountRecord {
  volumeId: string;
  /** The volume's name when it was mounted (E2B's `SandboxVolumeMount.name`). */
  name: string;
  /** Absolute mount path inside the sandbox. */
  path: string;
}

export interface VolumeRow {
  id: string;
  name: string;
  sizeMB: number;
  createdAt: string;
}
