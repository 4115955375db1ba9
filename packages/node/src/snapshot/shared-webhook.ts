// A webhook definition kept in the snapshot repository, so every node that shares the repository delivers its
// own events to it (docs/events.md#in-a-cluster). One signed document per webhook, `webhooks/<id>`; the secret is
// in it because every node signs its deliveries with it (the repository already holds sandbox memory: it is
// the cluster's private storage, docs/security.md#webhooks).
import { z } from 'zod';

export const sharedWebhookSchema = z
  .object({
    id: z.uuid(),
    name: z.string().max(256),
    url: z.string().min(1).max(8192),
    enabled: z.boolean(),
    events: z.array(z.string().min(1).max(64)).min(1).max(16),
    secret: z.string().min(1).max(1024),
    createdAt: z.string().min(1).max(64),
  })
  .strict();

export type SharedWebhook = z.infer<typeof sharedWebhookSchema>;

export interface SharedWebhooks {
  /** Every readable definition, and the names of documents that did not verify or parse. */
  webhooks: SharedWebhook[];
  unreadable: string[];
}
