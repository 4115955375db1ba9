// The defaults E2B's API applies to fields a request leaves out, as the e2b SDK's OpenAPI types state them
// (`node_modules/e2b/dist/index.d.mts`, `components["schemas"]`). Route files take them from here. v1 create keeps
// the reference's own defaults (`[orchestrator].default_sandbox_timeout_secs`, autoPause on); see
// docs/differences.md.

/** `NewSandboxV2.timeout`. */
export const V2_CREATE_TIMEOUT_SECS = 300;

/** `NewSandboxV2.autoPause` (and `NewSandbox.autoPause` on E2B; v1 keeps the reference's `true`). */
export const V2_CREATE_AUTO_PAUSE = false;

/** v1 `POST /sandboxes` `autoPause` (docs/architecture.md). */
export const V1_CREATE_AUTO_PAUSE = true;

/** `ConnectSandboxV2.timeout`. */
export const V2_CONNECT_TIMEOUT_SECS = 300;

/** `ResumedSandbox.timeout` (deprecated `POST /sandboxes/{id}/resume`). */
export const RESUME_TIMEOUT_SECS = 15;

/** `ConnectSandbox.memory`, `ConnectSandboxV2.memory`, `ResumedSandbox.memory`, `SandboxPauseRequest.memory`. */
export const KEEP_MEMORY = true;

/** `POST /sandboxes/{id}/timeout` without a body (the reference's; E2B requires one). */
export const SET_TIMEOUT_SECS = 15;

/** `SandboxRefreshRequest.duration` when left out (reference). */
export const REFRESH_DURATION_SECS = 15;
