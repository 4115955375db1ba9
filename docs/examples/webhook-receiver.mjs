// A minimal receiver of aenv (and E2B) webhook deliveries: verifies e2b-signature, drops repeats by event id,
// answers 2xx fast. Run: WEBHOOK_SECRET=… PORT=8080 node webhook-receiver.mjs  (docs/events.md#a-receiver)
import { createHash, timingSafeEqual } from 'node:crypto';
import { createServer } from 'node:http';

const secret = process.env.WEBHOOK_SECRET;
if (!secret) throw new Error('set WEBHOOK_SECRET to the signatureSecret the webhook was registered with');
const port = Number(process.env.PORT ?? 8080);

// base64url(sha256(secret + raw body)) without '=' padding.
function sign(raw) {
  return createHash('sha256')
    .update(secret + raw)
    .digest('base64')
    .replace(/\+/g, '-')
    .replace(/\//g, '_')
    .replace(/=+$/, '');
}

function verified(raw, header) {
  const want = Buffer.from(sign(raw));
  const got = Buffer.from(String(header ?? ''));
  return want.length === got.length && timingSafeEqual(want, got);
}

// Deliveries are at least once: remember the event ids already handled (a real receiver keeps them durably).
const seen = new Set();

createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const raw = Buffer.concat(chunks).toString('utf8'); // verify the exact bytes, before any JSON parsing
    if (!verified(raw, req.headers['e2b-signature'])) {
      res.writeHead(401).end();
      return;
    }
    const event = JSON.parse(raw);
    res.writeHead(204).end(); // answer first: the node waits at most [events.webhooks].timeout_ms
    if (seen.has(event.id)) return;
    seen.add(event.id);
    console.log(
      JSON.stringify({ verified: true, id: event.id, type: event.type, sandboxId: event.sandboxId }),
    );
  });
}).listen(port, '127.0.0.1', () => console.log(`listening on http://127.0.0.1:${port}/`));
