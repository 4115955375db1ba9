// `aenv webhook create|list|get|update|rm|deliveries`: E2B's webhooks API (docs/events.md#webhooks). Through a
// gateway a webhook receives the events of every node (docs/events.md#in-a-cluster).
import { readFile } from 'node:fs/promises';
import { Option, type Command } from 'commander';
import type {
  WebhookDeliveryAttempt,
  WebhookDeliveryGroup,
  WebhookDetail,
  WebhookEventType,
  WebhookUpdate,
} from '@aenv/protocol';
import { clientAction, withGlobalFlags } from '../client/context.js';
import { usageError } from '../client/errors.js';
import type { Column } from '../client/output.js';
import { collect, intIn } from '../client/parse.js';

const PREFIX = 'sandbox.lifecycle.';
const EVENTS = ['created', 'updated', 'paused', 'resumed', 'killed', 'checkpointed'] as const;

const WEBHOOK_COLUMNS: Column<WebhookDetail>[] = [
  { header: 'ID', value: (w) => w.id },
  { header: 'NAME', value: (w) => w.name },
  { header: 'URL', value: (w) => w.url },
  { header: 'ENABLED', value: (w) => String(w.enabled) },
  { header: 'EVENTS', value: (w) => w.events.map((e) => e.slice(PREFIX.length)).join(',') },
  { header: 'CREATED', value: (w) => w.createdAt },
];

type Row = WebhookDeliveryAttempt & { group: WebhookDeliveryGroup };
const DELIVERY_COLUMNS: Column<Row>[] = [
  { header: 'EVENT', value: (a) => a.eventId },
  { header: 'TYPE', value: (a) => a.eventType.slice(PREFIX.length) },
  { header: 'SANDBOX', value: (a) => a.sandboxId },
  { header: 'STATUS', value: (a) => a.status },
  { header: 'HTTP', value: (a) => (a.responseHttpStatusCode === null ? '-' : a.responseHttpStatusCode) },
  { header: 'MS', value: (a) => a.durationMs },
  { header: 'ERROR', value: (a) => a.errorClass ?? '' },
  { header: 'AT', value: (a) => a.timestamp },
];

/** `created,killed` or `sandbox.lifecycle.created` → the API's event types. */
function eventTypes(list: string[] | undefined): WebhookEventType[] | undefined {
  if (!list) return undefined;
  const out = list
    .flatMap((x) => x.split(','))
    .map((x) => x.trim())
    .filter(Boolean)
    .map((x) => (x.startsWith(PREFIX) ? x.slice(PREFIX.length) : x));
  for (const e of out)
    if (!(EVENTS as readonly string[]).includes(e))
      throw usageError(`unknown event ${JSON.stringify(e)}`, `use ${EVENTS.join(', ')}`);
  return [...new Set(out)].map((e) => `${PREFIX}${e}` as WebhookEventType);
}

/** The secret from a file or stdin (`-`), never from the command line (other users see it in `ps`). */
async function secretFrom(path: string | undefined): Promise<string | undefined> {
  if (path === undefined) return undefined;
  let text: string;
  if (path === '-') {
    const chunks: Buffer[] = [];
    for await (const c of process.stdin) chunks.push(c as Buffer);
    text = Buffer.concat(chunks).toString('utf8');
  } else {
    text = await readFile(path, 'utf8').catch((e: NodeJS.ErrnoException) => {
      throw usageError(`cannot read the secret file ${path}: ${e.code ?? e.message}`);
    });
  }
  const secret = text.replace(/\r?\n$/, '');
  if (!secret) throw usageError('the signature secret is empty');
  return secret;
}

const secretOption = () =>
  new Option('--secret-file <path>', 'file holding the signature secret (`-`: stdin)');

export function registerWebhookCommands(program: Command): void {
  const webhook = program
    .command('webhook')
    .alias('webhooks')
    .description('webhooks: lifecycle events pushed to a URL, signed (docs/events.md)');

  withGlobalFlags(
    webhook
      .command('create')
      .argument('<target>', 'the receiver URL')
      .description('register a webhook')
      .requiredOption(
        '--event <type>',
        `event to send (repeatable or comma-separated: ${EVENTS.join(', ')})`,
        collect,
      )
      .addOption(secretOption().makeOptionMandatory())
      .option('--name <name>', 'a name for it')
      .option('--disabled', 'register it without delivering yet'),
  ).action(
    clientAction(
      async (
        ctx,
        target: string,
        f: { event: string[]; secretFile: string; name?: string; disabled?: boolean },
      ) => {
        const w = await ctx.api.webhooks.create({
          url: target,
          events: eventTypes(f.event)!,
          signatureSecret: (await secretFrom(f.secretFile))!,
          ...(f.name !== undefined ? { name: f.name } : {}),
          ...(f.disabled ? { enabled: false } : {}),
        });
        ctx.out.done(w, w.id);
      },
    ),
  );

  withGlobalFlags(webhook.command('list').alias('ls').description('list webhooks')).action(
    clientAction(async (ctx) => ctx.out.list(await ctx.api.webhooks.list(), WEBHOOK_COLUMNS)),
  );

  withGlobalFlags(webhook.command('get').argument('<id>', 'webhook id').description('show a webhook')).action(
    clientAction(async (ctx, id: string) => ctx.out.record(await ctx.api.webhooks.get(id))),
  );

  withGlobalFlags(
    webhook
      .command('update')
      .argument('<id>', 'webhook id')
      .description('change a webhook (only what is given)')
      .option('--target <url>', 'a new receiver URL')
      .option('--event <type>', 'the new event list (repeatable or comma-separated)', collect)
      .addOption(secretOption())
      .option('--name <name>', 'a new name')
      .addOption(new Option('--enable', 'deliver again').conflicts('disable'))
      .option('--disable', 'stop delivering (kept registered)'),
  ).action(
    clientAction(
      async (
        ctx,
        id: string,
        f: {
          target?: string;
          event?: string[];
          secretFile?: string;
          name?: string;
          enable?: boolean;
          disable?: boolean;
        },
      ) => {
        const secret = await secretFrom(f.secretFile);
        const events = eventTypes(f.event);
        const body: WebhookUpdate = {
          ...(f.target !== undefined ? { url: f.target } : {}),
          ...(events ? { events } : {}),
          ...(secret !== undefined ? { signatureSecret: secret } : {}),
          ...(f.name !== undefined ? { name: f.name } : {}),
          ...(f.enable ? { enabled: true } : f.disable ? { enabled: false } : {}),
        };
        if (!Object.keys(body).length)
          throw usageError(
            'nothing to change',
            'give --target, --event, --secret-file, --name, --enable or --disable',
          );
        const w = await ctx.api.webhooks.update(id, body);
        ctx.out.done(w, `updated ${w.id}`);
      },
    ),
  );

  withGlobalFlags(
    webhook.command('delete').alias('rm').argument('<id>', 'webhook id').description('delete a webhook'),
  ).action(
    clientAction(async (ctx, id: string) => {
      await ctx.api.webhooks.delete(id);
      ctx.out.done({ id, deleted: true }, `deleted ${id}`);
    }),
  );

  withGlobalFlags(
    webhook
      .command('deliveries')
      .argument('<id>', 'webhook id')
      .description('delivery attempts, newest event first (through a gateway: every node)')
      .option('--limit <n>', 'events to show (1..1000)', intIn(1, 1000), 25)
      .addOption(
        new Option('--status <status>', 'only attempts that ended so').choices(['success', 'failed']),
      )
      .option('--event <type>', 'only these event types (repeatable or comma-separated)', collect),
  ).action(
    clientAction(
      async (ctx, id: string, f: { limit: number; status?: 'success' | 'failed'; event?: string[] }) => {
        const groups: WebhookDeliveryGroup[] = [];
        const events = eventTypes(f.event);
        let cursor: string | undefined;
        do {
          const page = await ctx.api.webhooks.deliveries(id, {
            limit: Math.min(100, f.limit - groups.length),
            ...(cursor ? { cursor } : {}),
            ...(f.status ? { deliveryStatus: [f.status] } : {}),
            ...(events ? { eventType: events } : {}),
          });
          groups.push(...page.data);
          cursor = page.nextCursor ?? undefined;
        } while (cursor && groups.length < f.limit);
        if (ctx.out.mode === 'json') return ctx.out.record(groups);
        ctx.out.list(
          groups.flatMap((g) => g.attempts.map((a) => ({ ...a, group: g }))),
          DELIVERY_COLUMNS,
        );
      },
    ),
  );
}
