// Contract between the image subsystem and its consumers (runtime driver, template builder, orchestrator).

/** The parts of an OCI image config that aenv uses (from the image config's "config" object). */
export interface ImageConfig {
  env: string[];
  workingDir?: string;
  user?: string;
  entrypoint?: string[];
  cmd?: string[];
  exposedPorts: string[];
  volumes: string[];
  labels: Record<string, string>;
}

export interface UnpackedLayer {
  /** Digest of the uncompressed layer (OCI diff id), "sha256:<hex>". */
  diffId: string;
  /** Read-only directory, usable as an overlayfs lowerdir (whiteouts in overlay form, ownership shifted). */
  dir: string;
  size: number;
}

export interface PulledImage {
  /** Canonical reference that was pulled: "docker.io/library/ubuntu:24.04", "oci:/path:tag", ... */
  reference: string;
  /** Digest of the image manifest chosen for this host's platform. */
  manifestDigest: string;
  /** Bottom layer first. */
  layers: UnpackedLayer[];
  config: ImageConfig;
  /** Digest of the image config blob. */
  configDigest?: string;
  /** "linux/amd64", "linux/arm64/v8". */
  platform?: string;
}
