// Which nameserver sandboxes use: the host's first non-loopback IPv4 nameserver.

import { readFile } from 'node:fs/promises';
import { parseIPv4 } from '@aenv/config';

/** systemd-resolved's upstream list first (its /etc/resolv.conf usually names the 127.0.0.53 stub). */
export const DEFAULT_RESOLV_CONF_PATHS = ['/run/systemd/resolve/resolv.conf', '/etc/resolv.conf'];

/** `nameserver` values of a resolv.conf text, in file order. */
export function parseNameservers(text: string): string[] {
  const out: string[] = [];
  for (const raw of text.split('\n')) {
    const line = raw.replace(/[#;].*$/, '').trim();
    const m = /^nameserver\s+(\S+)$/.exec(line);
    if (m) out.push(m[1] as string);
  }
  return out;
}

/** First IPv4 that is neither loopback (127/8) nor unspecified (0.0.0.0); null when there is none. */
export function pickSandboxNameserver(nameservers: readonly string[]): string | null {
  for (const ns of nameservers) {
    const v4 = parseIPv4(ns);
    if (v4 === null) continue;
    if (v4 >> 24n === 127n || v4 === 0n) continue;
    return ns;
  }
  return null;
}

/** Looks through the files in order; a missing or unreadable file is skipped. */
export async function resolveSandboxNameserver(paths: readonly string[]): Promise<string | null> {
  for (const path of paths) {
    let text: string;
    try {
      text = await readFile(path, 'utf8');
    } catch {
      continue;
    }
    const ns = pickSandboxNameserver(parseNameservers(text));
    if (ns) return ns;
  }
  return null;
}
