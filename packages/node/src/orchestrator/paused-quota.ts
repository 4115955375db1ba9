// The node-wide budget of paused-sandbox state (`[orchestrator].paused_quota_mb`) and the retention of paused
// sandboxes (`paused_retention_secs`); docs/security.md, "Starving the others or the host". The bytes of each
// pause are measured on disk when it is taken and kept in its record (state.db), so the count survives restarts.
import { DomainError, ErrorKind } from '@aenv/protocol';
import type { SandboxRecord } from './types.js';

const MIB = 1024 * 1024;

function mib(bytes: number): string {
  return `${(bytes / MIB).toFixed(1)} MiB`;
}

/** The error of a pause the quota does not allow (HTTP 507; the sandbox keeps running). */
export class PausedQuotaError extends DomainError {
  constructor(
    readonly sandboxId: string,
    message: string,
    /** What the refused pause measured, when it got that far. */
    readonly neededBytes?: number,
  ) {
    super(ErrorKind.InsufficientStorage, message, { details: { sandboxId } });
    this.name = 'PausedQuotaError';
  }
}

/** Bytes the pause artifacts of paused sandboxes hold. */
export function pausedBytesInUse(records: Iterable<SandboxRecord>): number {
  let total = 0;
  for (const r of records) if (r.state === 'paused') total += r.paused?.bytes ?? 0;
  return total;
}

/** Paused sandboxes kept longer than `retentionMs` (0 = never expire), oldest pause first. */
export function expiredPaused(
  records: Iterable<SandboxRecord>,
  retentionMs: number,
  now: number,
): SandboxRecord[] {
  if (retentionMs <= 0) return [];
  const out: SandboxRecord[] = [];
  for (const r of records) {
    if (r.state !== 'paused' || !r.paused) continue;
    const at = Date.parse(r.paused.pausedAt);
    if (Number.isFinite(at) && now - at >= retentionMs) out.push(r);
  }
  return out.sort((a, b) => Date.parse(a.paused!.pausedAt) - Date.parse(b.paused!.pausedAt));
}

/**
 * Admission of pauses against the quota. Pauses in flight hold what they were admitted with until they are
 * recorded (or fail), so two concurrent pauses cannot both take the last room.
 */
export class PausedQuota {
  private readonly reserved = new Map<string, number>();

  /** `quotaBytes` 0 = no quota. */
  constructor(readonly quotaBytes: number) {}

  /** Bytes in use: recorded pauses plus pauses in flight. */
  used(records: Iterable<SandboxRecord>): number {
    let total = pausedBytesInUse(records);
    for (const b of this.reserved.values()) total += b;
    return total;
  }

  /** Refuses a pause up front when the quota is already used up (before anything is frozen or written). */
  checkRoom(id: string, records: Iterable<SandboxRecord>): void {
    if (this.quotaBytes <= 0) return;
    const used = this.used(records);
    if (used >= this.quotaBytes) throw this.refusal(id, used, undefined);
  }

  /** Admits a pause of `bytes` (measured on disk, before it is marked complete) or throws; reserves it. */
  admit(id: string, bytes: number, records: Iterable<SandboxRecord>): void {
    if (this.quotaBytes > 0) {
      const used = this.used(records);
      if (used + bytes > this.quotaBytes) throw this.refusal(id, used, bytes);
    }
    this.reserved.set(id, bytes);
  }

  /** Counts a pause that is not refused (a shutdown pause): its bytes are in use whatever the quota. */
  force(id: string, bytes: number): void {
    this.reserved.set(id, bytes);
  }

  /** The pause of `id` is recorded (its bytes now count through its record) or failed. */
  release(id: string): void {
    this.reserved.delete(id);
  }

  /** Whether a pause of `bytes` would fit now. */
  fits(bytes: number, records: Iterable<SandboxRecord>): boolean {
    return this.quotaBytes <= 0 || this.used(records) + bytes <= this.quotaBytes;
  }

  private refusal(id: string, used: number, bytes: number | undefined): PausedQuotaError {
    const what = bytes === undefined ? '' : ` (this pause needs ${mib(bytes)})`;
    return new PausedQuotaError(
      id,
      `pause refused: paused sandboxes of this node already hold ${mib(used)} of the ${mib(this.quotaBytes)} allowed by orchestrator.paused_quota_mb${what}; the sandbox keeps running. Delete paused sandboxes to make room.`,
      bytes,
    );
  }
}
