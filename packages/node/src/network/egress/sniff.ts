// What a redirected connection asks for, from its first bytes: the TLS ClientHello's server name (parsed by
// read-tls-client-hello) or the Host of a plain HTTP request. The bytes read are pushed back into the socket,
// so the upstream sees the stream exactly as the sandbox sent it.

import type { Socket } from 'node:net';
import { getExtensionData, readTlsClientHello } from 'read-tls-client-hello';
import { normalizeHostName } from './domain-match.js';
import { MAX_HTTP_HEAD_BYTES, looksLikeHttp, parseHttpHead } from './http-head.js';

export type Sniffed =
  { kind: 'tls' | 'http'; name: string } | { kind: 'refused'; reason: string; http: boolean };

const TLS_HANDSHAKE = 0x16;

/** Resolves with what the connection asks for; never rejects (a broken or silent client is `refused`). */
export function sniff(socket: Socket, timeoutMs: number): Promise<Sniffed> {
  return new Promise((resolve) => {
    let settled = false;
    const done = (result: Sniffed) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.off('close', onClose);
      socket.off('end', onClose);
      resolve(result);
    };
    const timer = setTimeout(
      () => done({ kind: 'refused', reason: 'no request within the sniff timeout', http: false }),
      timeoutMs,
    );
    // 'end' too: the proxy's sockets allow half-open, so a client that sends FIN first would otherwise sit here.
    const onClose = () => done({ kind: 'refused', reason: 'closed before a request', http: false });
    socket.once('close', onClose);
    socket.once('end', onClose);
    socket.once('data', (first: Buffer) => {
      socket.pause();
      socket.unshift(first);
      if (first[0] === TLS_HANDSHAKE) {
        readTlsClientHello(socket).then(
          (hello) => {
            const sni = getExtensionData(hello, 'server_name') as { serverName?: string } | null | undefined;
            const name = sni?.serverName !== undefined ? normalizeHostName(sni.serverName) : null;
            done(
              name === null
                ? { kind: 'refused', reason: 'TLS without a server name', http: false }
                : { kind: 'tls', name },
            );
          },
          () => done({ kind: 'refused', reason: 'malformed TLS ClientHello', http: false }),
        );
      } else if (looksLikeHttp(first)) {
        void readHttpHost(socket).then(done);
      } else {
        done({ kind: 'refused', reason: 'neither TLS nor HTTP', http: false });
      }
    });
  });
}

/** Reads until the request head is complete (or too long), then puts everything back. */
function readHttpHost(socket: Socket): Promise<Sniffed> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      chunks.push(chunk);
      size += chunk.length;
      const buf = Buffer.concat(chunks, size);
      const head = parseHttpHead(buf.subarray(0, MAX_HTTP_HEAD_BYTES + 4));
      if (head.kind === 'incomplete') return;
      socket.off('data', onData);
      socket.pause();
      socket.unshift(buf);
      resolve(
        head.kind === 'host'
          ? { kind: 'http', name: head.host }
          : { kind: 'refused', reason: head.reason, http: true },
      );
    };
    socket.on('data', onData);
    socket.resume();
  });
}
