// The data plane (docs/architecture.md): the reverse proxy to sandbox ports over the SandboxDirectory port,
// and the pieces a gateway reuses to forward a request (routing, framing, header rules).
export { SandboxProxy, type SandboxProxyOptions } from './proxy.js';
export {
  AutoResumeTimeout,
  type ProxyTarget,
  type SandboxDirectory,
  type SandboxState,
} from './directory.js';
export type { DataPlane } from './data-plane.js';
export { classify, isSignedFilesUrl, parseProxyHost, RoutingError, type DataPlaneRoute } from './routing.js';
export { FramingError, requestFraming, type BodyFraming } from './framing.js';
export {
  downstreamResponseHeaders,
  endToEnd,
  maskedHost,
  PROXY_HEADERS,
  upstreamRequestHeaders,
  type UpstreamHeaderOptions,
} from './headers.js';
export {
  envdUrl,
  parseSignedFiles,
  SignedUrlBudgetExceeded,
  SignedUrlRouter,
  type SignedFilesRequest,
  type SigningCandidate,
} from './signed-urls.js';
export {
  forwardedHeaders,
  relayRequest,
  relayUpgrade,
  RelayResponseTooLarge,
  RelayTimeout,
  RelayUpstreamError,
  type BufferedAnswer,
  type RelayOptions,
  type RelayTarget,
} from './relay.js';
