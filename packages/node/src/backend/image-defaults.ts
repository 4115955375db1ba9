import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { PulledImage } from '../image/types.js';

/** The user commands run as by default: the image's `User`, else `user` when the image has one (E2B convention), else root. */
export function defaultUserOf(image: PulledImage): string {
  const configured = image.config.user?.split(':', 1)[0];
  if (configured) return configured;
  for (const layer of [...image.layers].reverse()) {
    const passwd = join(layer.dir, 'etc', 'passwd');
    if (!existsSync(passwd)) continue;
    const text = readFileSync(passwd, 'utf8');
    return /^user:/m.test(text) ? 'user' : 'root';
  }
  return 'root';
}

/** `KEY=VALUE` image env lines as a map (later entries win). */
export function envOf(image: PulledImage): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of image.config.env) {
    const eq = line.indexOf('=');
    if (eq > 0) out[line.slice(0, eq)] = line.slice(eq + 1);
  }
  return out;
}
