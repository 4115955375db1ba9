import { createServer, connect, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';

/** A loopback TCP forwarder that can be taken down and brought back on the same port (a Redis outage). */
export class TcpProxy {
  #server: Server | undefined;
  #sockets = new Set<Socket>();
  port = 0;

  constructor(
    private readonly targetPort: number,
    private readonly targetHost = '127.0.0.1',
  ) {}

  async up(): Promise<void> {
    const server = createServer((client) => {
      const upstream = connect(this.targetPort, this.targetHost);
      for (const s of [client, upstream]) {
        this.#sockets.add(s);
        s.on('close', () => this.#sockets.delete(s));
        s.on('error', () => {
          client.destroy();
          upstream.destroy();
        });
      }
      client.pipe(upstream).pipe(client);
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.port, '127.0.0.1', () => resolve());
    });
    this.port = (server.address() as AddressInfo).port;
    this.#server = server;
  }

  /** Stops listening and cuts every connection: clients see a refused, then absent, Redis. */
  async down(): Promise<void> {
    const server = this.#server;
    this.#server = undefined;
    for (const s of this.#sockets) s.destroy();
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}
