// A volume's content token (docs/volumes.md#the-content-api): derived from the cluster's one API key and the
// volume id, so the node that holds the volume and every gateway in front of it check the same token without
// sharing any state.
import { createHmac, timingSafeEqual } from 'node:crypto';

export function volumeContentToken(apiKey: string, volumeId: string): string {
  return createHmac('sha256', apiKey).update(`aenv-volume:${volumeId}`).digest('hex');
}

/** Whether `token` is volume `volumeId`'s content token (constant time). */
export function volumeContentTokenMatches(apiKey: string, volumeId: string, token: string): boolean {
  const want = Buffer.from(volumeContentToken(apiKey, volumeId));
  const got = Buffer.from(token);
  return got.length === want.length && timingSafeEqual(got, want);
}
