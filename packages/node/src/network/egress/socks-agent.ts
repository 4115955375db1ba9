// Keep-alive HTTP and HTTPS agents whose upstream connections are tunnels through one SOCKS5 upstream
// (socks.ts): the intercepted hop of a sandbox with both `network.rules` and an egressProxy leaves through its
// proxy, like everything else it sends. TLS to the upstream is made inside the tunnel, so the proxy sees only
// the CONNECT destination and ciphertext.

import http from 'node:http';
import https from 'node:https';
import type { Duplex } from 'node:stream';
import type { EgressProxyConfig } from '../types.js';
import type { SocksConnection, SocksDestination } from './socks.js';

/** Opens a tunnel to `destination` through `proxy` (connectThroughSocks with the node's resolver bound). */
export type SocksDialer = (proxy: EgressProxyConfig, destination: SocksDestination) => SocksConnection;

type Done = (err: Error | null, stream: Duplex) => void;

/** The tunnel for a request's `host`:`port`, handed to `done` once the proxy reports it connected. */
function tunnel(
  dial: SocksDialer,
  proxy: EgressProxyConfig,
  options: { host?: string | null; port?: number | string | null },
  done: (err: Error | null, socket?: Duplex) => void,
): void {
  let conn: SocksConnection;
  try {
    conn = dial(proxy, { host: String(options.host), port: Number(options.port) });
  } catch (err) {
    // Asynchronously, as the agent expects of a callback.
    return void setImmediate(() => done(err as Error));
  }
  const { socket, ready } = conn;
  ready.then(
    () => {
      // A pooled connection the upstream ends must close, so the agent drops it rather than reuse a dead
      // half-open one (the tunnel is made half-open for the splicing path).
      socket.allowHalfOpen = false;
      // After the socks library's own resume of the socket (queued when the tunnel stood).
      setImmediate(() => done(null, socket));
    },
    (err: Error) => done(err),
  );
}

export class SocksHttpAgent extends http.Agent {
  constructor(
    private readonly dial: SocksDialer,
    private readonly proxy: EgressProxyConfig,
    options: http.AgentOptions,
  ) {
    super(options);
  }

  override createConnection(options: http.ClientRequestArgs, callback?: Done): undefined {
    tunnel(this.dial, this.proxy, options, (err, socket) => callback?.(err, socket as Duplex));
    return undefined;
  }
}

export class SocksHttpsAgent extends https.Agent {
  constructor(
    private readonly dial: SocksDialer,
    private readonly proxy: EgressProxyConfig,
    options: https.AgentOptions,
  ) {
    super(options);
  }

  override createConnection(options: https.RequestOptions, callback?: Done): undefined {
    tunnel(this.dial, this.proxy, options, (err, socket) => {
      if (err || !socket) return callback?.(err ?? new Error('no tunnel'), socket as Duplex);
      // https.Agent's own createConnection (TLS, its session cache) over the tunnel instead of a new socket.
      const secure = super.createConnection({ ...options, socket } as https.RequestOptions);
      callback?.(null, secure as Duplex);
    });
    return undefined;
  }
}
