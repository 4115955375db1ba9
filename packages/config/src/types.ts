import type { DeepReadonly, InferEntries } from './field.js';
import type { ConfigSchema } from './schema.js';

/** The configuration while it is being normalised and validated (before it is frozen). */
export type MutableConfig = InferEntries<ConfigSchema['entries']>;

/** The validated, fully resolved, deeply frozen node configuration. Keys mirror the TOML keys. */
export type AenvConfig = DeepReadonly<MutableConfig>;

export type VirtualizationMode = AenvConfig['virtualization_mode'];
export type LogFormat = AenvConfig['log_format'];
export type LogLevel = AenvConfig['log_level'];
export type RuntimeConfig = AenvConfig['runtime'];
export type ImageConfig = AenvConfig['image'];
export type NetworkConfig = AenvConfig['network'];
export type OrchestratorConfig = AenvConfig['orchestrator'];
export type PoolConfig = AenvConfig['pool'];
export type SnapshotConfig = AenvConfig['snapshot'];
export type BackendConfig = AenvConfig['backend'];
export type NodeIdentityConfig = AenvConfig['node_identity'];
export type ObservabilityConfig = AenvConfig['observability'];
export type TemplateBuildConfig = AenvConfig['template_build'];
export type MachineConfig = AenvConfig['machine'];
export type EnvdConfig = AenvConfig['envd'];
