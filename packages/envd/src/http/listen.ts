import http from 'node:http';
import type { Http2Server } from 'node:http2';
import net from 'node:net';
import type { Req, Res } from './respond.js';

export interface HttpListener {
  port: number;
  close(): Promise<void>;
}

const H2_PREFACE = Buffer.from('PRI * HTTP/2.0\r\n');

/**
 * One TCP port serving HTTP/1.1 and cleartext HTTP/2 with prior knowledge (h2c): the first bytes of
 * each connection decide which server gets it. The e2b SDK speaks HTTP/1.1 over http://; the aenv
 * server may use h2c for many concurrent streams over one connection.
 */
export async function listenHttp(
  handler: (req: Req, res: Res) => void,
  port: number,
  host: string,
): Promise<HttpListener> {
  const h1 = http.createServer({ keepAliveTimeout: 65_000, requestTimeout: 0 }, handler);
  // node:http2 costs ~3 MB per process: load it when the first h2c connection arrives.
  let h2: Promise<Http2Server> | undefined;
  const h2Server = () => (h2 ??= import('node:http2').then((m) => m.createServer({}, handler)));
  const sockets = new Set<net.Socket>();
  const tcp = net.createServer({ noDelay: true }, (socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
    const onData = (chunk: Buffer) => {
      socket.pause();
      socket.removeListener('data', onData);
      socket.unshift(chunk);
      const n = Math.min(chunk.length, H2_PREFACE.length);
      const isH2 = n > 0 && chunk.subarray(0, n).equals(H2_PREFACE.subarray(0, n));
      if (isH2) {
        // http2 picks up the unshifted preface itself; resuming here would hand it over twice.
        h2Server().then(
          (server) => server.emit('connection', socket),
          () => socket.destroy(),
        );
      } else {
        h1.emit('connection', socket);
        socket.resume();
      }
    };
    socket.on('data', onData);
    socket.on('error', () => socket.destroy());
  });
  await new Promise<void>((resolve, reject) => {
    tcp.once('error', reject);
    tcp.listen(port, host, () => {
      tcp.off('error', reject);
      resolve();
    });
  });
  const address = tcp.address() as net.AddressInfo;
  return {
    port: address.port,
    close: () =>
      new Promise<void>((resolve) => {
        tcp.close(() => resolve());
        for (const s of sockets) s.destroy();
      }),
  };
}
