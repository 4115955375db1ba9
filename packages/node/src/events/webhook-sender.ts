// One delivery attempt: a signed POST of the stored body to the webhook's URL, bounded by timeout_ms, to an address
// the target policy allows (docs/events.md#webhooks, docs/security.md#webhooks).
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { isIP, type LookupFunction } from 'node:net';
import { randomUUID } from 'node:crypto';
import { webhookSignature } from './webhook-signature.js';
import { defaultPort, refusedAddress, refusedUrl, urlHost, type TargetPolicy } from './webhook-target.js';
import type { DeliveryAttempt, ErrorClass, PendingDelivery, Webhook } from './webhook-store.js';

const RESPONSE_BODY_KEPT = 1024;
const USER_AGENT = 'aenv-webhooks/1';

class RefusedTarget extends Error {
  readonly code = 'EAENV_REFUSED_TARGET';
}

/** A lookup that fails when any address the name resolves to is refused by the policy. */
function checkedLookup(policy: TargetPolicy, port: number): LookupFunction {
  return (hostname, options, callback) => {
    dnsLookup(hostname, { ...options, all: true }, (err, addresses: LookupAddress[]) => {
      if (err) return callback(err, '', 4);
      for (const a of addresses) {
        const why = refusedAddress(a.address, port, policy);
        if (why) return callback(new RefusedTarget(`${hostname} resolves to ${why}`), '', 4);
      }
      if (options.all) return (callback as (e: null, a: LookupAddress[]) => void)(null, addresses);
      const first = addresses[0]!;
      callback(null, first.address, first.family);
    });
  };
}

function classify(e: NodeJS.ErrnoException, timedOut: boolean): ErrorClass {
  if (timedOut) return 'timeout';
  if (e instanceof RefusedTarget) return 'request_error';
  if (e.code === 'ENOTFOUND' || e.code === 'EAI_AGAIN' || e.code === 'EAI_FAIL') return 'dns_error';
  return 'transport_error';
}

export interface SendOptions {
  timeoutMs: number;
  policy: TargetPolicy;
  /** Aborts the attempt (shutdown): the promise then resolves undefined and nothing is recorded. */
  signal: AbortSignal;
}

/** Makes one attempt; resolves the attempt to record, or undefined when it was aborted by `signal`. */
export function sendDelivery(
  w: Webhook,
  p: PendingDelivery,
  o: SendOptions,
): Promise<DeliveryAttempt | undefined> {
  const deliveryId = randomUUID();
  const started = Date.now();
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    'user-agent': USER_AGENT,
    'e2b-webhook-id': w.id,
    'e2b-delivery-id': deliveryId,
    'e2b-event-id': p.eventId,
    'e2b-signature-version': 'v1',
    'e2b-signature': webhookSignature(w.secret, p.body),
  };
  const attempt = (
    result: Pick<
      DeliveryAttempt,
      'status' | 'responseBody' | 'responseHeaders' | 'responseHttpStatusCode' | 'errorClass' | 'errorMessage'
    >,
  ): DeliveryAttempt => ({
    id: deliveryId,
    webhookId: w.id,
    eventId: p.eventId,
    sandboxId: p.sandboxId,
    eventType: p.eventType,
    durationMs: Date.now() - started,
    requestBody: p.body,
    requestHeaders: JSON.stringify({ ...headers, 'e2b-signature': '[redacted]' }),
    requestUrl: w.url,
    timestamp: new Date(started).toISOString(),
    ...result,
  });
  const failed = (errorClass: ErrorClass, errorMessage: string) =>
    attempt({
      status: 'failed',
      responseBody: null,
      responseHeaders: null,
      responseHttpStatusCode: null,
      errorClass,
      errorMessage,
    });

  const refused = refusedUrl(w.url, o.policy);
  if (refused) return Promise.resolve(failed('request_error', `url ${refused}`));
  const url = new URL(w.url);
  const port = defaultPort(url);
  const host = urlHost(url);

  return new Promise((resolve) => {
    let timedOut = false;
    let done = false;
    const finish = (a: DeliveryAttempt | undefined) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      o.signal.removeEventListener('abort', onAbort);
      resolve(a);
    };
    const send = url.protocol === 'https:' ? httpsRequest : httpRequest;
    const req = send(url, {
      method: 'POST',
      headers: { ...headers, 'content-length': String(Buffer.byteLength(p.body)) },
      ...(isIP(host) ? {} : { lookup: checkedLookup(o.policy, port) }),
      agent: false,
    });
    const timer = setTimeout(() => {
      timedOut = true;
      req.destroy(new Error(`no answer within ${o.timeoutMs} ms`));
    }, o.timeoutMs);
    const onAbort = () => {
      req.destroy();
      finish(undefined);
    };
    o.signal.addEventListener('abort', onAbort);
    req.on('error', (e: NodeJS.ErrnoException) => {
      if (o.signal.aborted) return finish(undefined);
      finish(failed(classify(e, timedOut), timedOut ? `no answer within ${o.timeoutMs} ms` : e.message));
    });
    req.on('response', (res: IncomingMessage) => {
      const chunks: Buffer[] = [];
      let kept = 0;
      res.on('data', (c: Buffer) => {
        if (kept < RESPONSE_BODY_KEPT) {
          chunks.push(c.subarray(0, RESPONSE_BODY_KEPT - kept));
          kept += Math.min(c.length, RESPONSE_BODY_KEPT - kept);
        }
      });
      res.on('error', () => undefined);
      // Cut before its end (the timeout, a reset): 'end' never comes.
      res.on('close', () =>
        finish(
          timedOut
            ? failed('timeout', `no answer within ${o.timeoutMs} ms`)
            : o.signal.aborted
              ? undefined
              : failed('transport_error', 'the answer was cut off'),
        ),
      );
      res.on('end', () => {
        const status = res.statusCode ?? 0;
        const ok = status >= 200 && status < 300;
        finish(
          attempt({
            status: ok ? 'success' : 'failed',
            responseBody: Buffer.concat(chunks).toString('utf8'),
            responseHeaders: JSON.stringify(res.headers),
            responseHttpStatusCode: status,
            errorClass: ok ? null : 'http_error',
            errorMessage: ok ? null : `the receiver answered ${status}`,
          }),
        );
      });
    });
    req.end(p.body);
  });
}
