// E2B's webhooks API as the node serves it (docs/events.md#webhooks): the shapes the CLI and other clients use.

export type WebhookEventType =
  | 'sandbox.lifecycle.created'
  | 'sandbox.lifecycle.updated'
  | 'sandbox.lifecycle.paused'
  | 'sandbox.lifecycle.resumed'
  | 'sandbox.lifecycle.killed'
  | 'sandbox.lifecycle.checkpointed';

/** `POST /events/webhooks`. */
export interface WebhookCreate {
  name?: string;
  url: string;
  events: WebhookEventType[];
  enabled?: boolean;
  signatureSecret: string;
}

/** `PATCH /events/webhooks/{id}`: only the fields given change. */
export type WebhookUpdate = Partial<WebhookCreate>;

/** E2B's `WebhookDetail`: never the secret. */
export interface WebhookDetail {
  id: string;
  teamId: string;
  name: string;
  createdAt: string;
  url: string;
  enabled: boolean;
  events: WebhookEventType[];
}

export type WebhookErrorClass =
  'http_error' | 'dns_error' | 'timeout' | 'transport_error' | 'request_error' | 'canceled';

/** One delivery attempt, as E2B's `WebhookDelivery` (docs/events.md#delivery-history); the node stores these. */
export interface WebhookDeliveryAttempt {
  id: string;
  webhookId: string;
  eventId: string;
  sandboxId: string;
  eventType: string;
  status: 'success' | 'failed';
  durationMs: number;
  requestBody: string;
  requestHeaders: string;
  requestUrl: string;
  responseBody: string | null;
  responseHeaders: string | null;
  responseHttpStatusCode: number | null;
  errorClass: WebhookErrorClass | null;
  errorMessage: string | null;
  timestamp: string;
  /** Added by the API on every answer. */
  teamId?: string;
}

/** E2B's `WebhookDeliveryGroup`: the attempts of one event. */
export interface WebhookDeliveryGroup {
  eventId: string;
  eventType: string;
  sandboxId: string;
  attempts: WebhookDeliveryAttempt[];
}

export interface WebhookDeliveries {
  data: WebhookDeliveryGroup[];
  nextCursor: string | null;
}

export interface WebhookDeliveriesQuery {
  limit?: number;
  cursor?: string;
  orderAsc?: boolean;
  deliveryStatus?: ('success' | 'failed')[];
  eventType?: WebhookEventType[];
  /** RFC 3339. */
  start?: string;
  end?: string;
}

export interface WebhookDurationStats {
  minimum: number;
  average: number;
  maximum: number;
}

export interface WebhookDeliveryStats {
  buckets: { timestamp: string; total: number; failed: number; durationMs: WebhookDurationStats }[];
  total: number;
  failed: number;
  durationMs: WebhookDurationStats;
}
