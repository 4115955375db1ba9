import { isIP } from 'node:net';
import { isAbsolute, posix } from 'node:path';
import type { SandboxSpec } from '../../driver.js';
import { RuntimeError } from '../../driver.js';

const ID_RE = /^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/;
const HOSTNAME_RE = /^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$/;
// Overlay option strings use ',' and ':' as separators and '\' as escape, and fstab lines split on
// whitespace: paths with any of them cannot be passed safely.
const OVERLAY_UNSAFE_RE = /[,:\\\s]/;
const ENV_KEY_RE = /^[A-Za-z_][A-Za-z0-9_]*$/;
// Mount points a volume may not cover: the kernel's and the tools' (envd, init). See docs/volumes.md.
const RESERVED_MOUNT_ROOTS = ['/proc', '/sys', '/dev', '/agentenv', '/run/agentenv'];

export function assertSandboxId(id: string): void {
  if (typeof id !== 'string' || !ID_RE.test(id)) {
    throw new RuntimeError(
      'InvalidSpec',
      `sandbox id ${JSON.stringify(id)} is invalid: must match ${ID_RE.source}`,
    );
  }
}

export function isSandboxId(name: string): boolean {
  return ID_RE.test(name);
}

export function assertHostPath(what: string, path: string): void {
  if (typeof path !== 'string' || !isAbsolute(path)) {
    throw new RuntimeError('InvalidSpec', `${what} ${JSON.stringify(path)} must be an absolute path`);
  }
  if (OVERLAY_UNSAFE_RE.test(path)) {
    throw new RuntimeError(
      'InvalidSpec',
      `${what} ${JSON.stringify(path)} must not contain ',', ':', '\\' or whitespace`,
    );
  }
}

/** Checks everything about a spec that can be checked without touching the host. */
export function validateSpec(spec: SandboxSpec): void {
  assertSandboxId(spec.id);
  if (typeof spec.hostname !== 'string' || !HOSTNAME_RE.test(spec.hostname)) {
    throw new RuntimeError(
      'InvalidSpec',
      `hostname ${JSON.stringify(spec.hostname)} is invalid: letters, digits and '-', at most 63 characters`,
    );
  }
  const layers = spec.rootfs?.layers;
  if (!Array.isArray(layers) || layers.length === 0) {
    throw new RuntimeError(
      'InvalidSpec',
      `sandbox ${spec.id}: rootfs.layers must list at least one image layer dir`,
    );
  }
  for (const dir of layers) assertHostPath('lower dir', dir);
  const options = Object.keys(spec.rootfs.driverOptions ?? {});
  if (options.length > 0) {
    throw new RuntimeError(
      'InvalidSpec',
      `sandbox ${spec.id}: the container driver takes no rootfs options (got ${options.join(', ')})`,
    );
  }
  assertHostPath('netnsPath', spec.netnsPath);
  const r = spec.resources;
  if (!r || !(Number.isFinite(r.cpuCount) && r.cpuCount > 0 && r.cpuCount <= 1024)) {
    throw new RuntimeError('InvalidSpec', `cpuCount ${r?.cpuCount} must be a number > 0 and <= 1024`);
  }
  if (!(Number.isInteger(r.memoryMB) && r.memoryMB >= 16 && r.memoryMB <= 16 * 1024 * 1024)) {
    throw new RuntimeError('InvalidSpec', `memoryMB ${r.memoryMB} must be an integer >= 16`);
  }
  if (!(Number.isInteger(r.pidsLimit) && r.pidsLimit >= 8)) {
    throw new RuntimeError('InvalidSpec', `pidsLimit ${r.pidsLimit} must be an integer >= 8`);
  }
  if (r.diskMB !== undefined && !(Number.isInteger(r.diskMB) && r.diskMB >= 1)) {
    throw new RuntimeError('InvalidSpec', `diskMB ${r.diskMB} must be an integer >= 1`);
  }
  for (const v of spec.volumes ?? []) {
    assertHostPath('volume source', v.source);
    if (!mountPathAllowed(v.destination))
      throw new RuntimeError(
        'InvalidSpec',
        `volume mount path ${JSON.stringify(v.destination)} is not allowed`,
      );
  }
  validateDrives(spec);
  for (const ns of spec.nameservers ?? []) {
    if (isIP(ns) === 0)
      throw new RuntimeError('InvalidSpec', `nameserver ${JSON.stringify(ns)} is not an IP address`);
  }
  for (const [k, v] of Object.entries(spec.initEnv ?? {})) {
    if (!ENV_KEY_RE.test(k))
      throw new RuntimeError('InvalidSpec', `initEnv key ${JSON.stringify(k)} is not a valid name`);
    if (typeof v !== 'string' || v.includes('\0')) {
      throw new RuntimeError('InvalidSpec', `initEnv ${k} must be a string without NUL bytes`);
    }
  }
}

function mountPathAllowed(d: unknown): boolean {
  return (
    typeof d === 'string' &&
    d.startsWith('/') &&
    d !== '/' &&
    posix.normalize(d) === d &&
    !d.endsWith('/') &&
    !d.includes('\0') &&
    !RESERVED_MOUNT_ROOTS.some((r) => d === r || d.startsWith(`${r}/`) || r.startsWith(`${d}/`))
  );
}

/** The drives' paths end up in fstab lines and overlay options: the API's rules, checked again here. */
function validateDrives(spec: SandboxSpec): void {
  const ids = new Set<string>();
  for (const d of spec.rootfs.drives ?? []) {
    const what = `sandbox ${spec.id}: drive ${JSON.stringify(d.id)}`;
    if (typeof d.id !== 'string' || !d.id || d.id.includes('/') || ids.has(d.id))
      throw new RuntimeError('InvalidSpec', `${what}: its id must be non-empty, unique and without '/'`);
    ids.add(d.id);
    if (!Array.isArray(d.layers) || d.layers.length === 0)
      throw new RuntimeError('InvalidSpec', `${what}: layers must list at least one image layer dir`);
    for (const dir of d.layers) assertHostPath('drive layer dir', dir);
    if (!mountPathAllowed(d.mountPath) || OVERLAY_UNSAFE_RE.test(d.mountPath))
      throw new RuntimeError(
        'InvalidSpec',
        `${what}: mount path ${JSON.stringify(d.mountPath)} is not allowed`,
      );
    const sub = d.subPath;
    if (
      sub !== undefined &&
      (typeof sub !== 'string' ||
        !sub ||
        sub.startsWith('/') ||
        OVERLAY_UNSAFE_RE.test(sub) ||
        sub.split('/').some((s) => s === '..' || s === '.' || s === ''))
    )
      throw new RuntimeError('InvalidSpec', `${what}: subPath ${JSON.stringify(sub)} is not allowed`);
  }
}
