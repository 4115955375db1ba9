// Image references: Docker-style registry references and the local OCI transports.
//
// Registry references follow the distribution/reference grammar:
//   [domain[:port]/]path-component(/path-component)*[:tag][@algorithm:hex]
// A first component is a registry host when it contains "." or ":", is "localhost", or has upper-case letters
// (repository paths are always lower-case). References without a host are "short names", completed by the
// resolver from `search_registries`.

import { isAbsolute, normalize } from 'node:path';
import { ImageError } from './errors.js';
import { parseDigest } from './digest.js';

export const DOCKER_HUB = 'docker.io';
export const DEFAULT_TAG = 'latest';

/** A fully-qualified registry reference. */
export interface RegistryReference {
  transport: 'registry';
  /** Registry host as written (lower-cased), with port when given: "docker.io", "127.0.0.1:5000". */
  registry: string;
  /** Repository path inside the registry: "library/ubuntu". */
  repository: string;
  tag?: string;
  digest?: string;
}

/** `oci:<dir>[:<tag>]` — an OCI image layout directory on this host. */
export interface OciLayoutReference {
  transport: 'oci';
  path: string;
  tag?: string;
}

/** `oci-archive:<file>[:<tag>]` — a tar file holding an OCI image layout. */
export interface OciArchiveReference {
  transport: 'oci-archive';
  path: string;
  tag?: string;
}

export type LocalReference = OciLayoutReference | OciArchiveReference;
export type ImageReference = RegistryReference | LocalReference;

/** A registry reference that may still lack its registry (a short name such as "ubuntu:24.04"). */
export interface ParsedRegistryReference {
  registry?: string;
  repository: string;
  tag?: string;
  digest?: string;
}

const MAX_NAME_LENGTH = 255;
const PATH_COMPONENT = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/;
const TAG = /^\w[\w.-]{0,127}$/;
const HOST_LABEL = /^[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?$/;
const IPV6_HOST = /^\[[0-9a-fA-F:.]+\]$/;
// OCI "org.opencontainers.image.ref.name" values (image-spec annotations.md).
const OCI_REF_NAME =
  /^[A-Za-z0-9]+(?:(?:[-._:@+]|--)[A-Za-z0-9]+)*(?:\/[A-Za-z0-9]+(?:(?:[-._:@+]|--)[A-Za-z0-9]+)*)*$/;

function invalid(ref: string, why: string): ImageError {
  return new ImageError('InvalidReference', `invalid image reference "${ref}": ${why}`);
}

/** True when `s` is a valid registry host, optionally with a port: "ghcr.io", "localhost:5000", "[::1]:5000". */
export function isValidRegistryHost(s: string): boolean {
  let host = s;
  const portMatch = /^(.*):(\d{1,5})$/.exec(s);
  if (portMatch && !(s.startsWith('[') && !s.includes(']:'))) {
    host = portMatch[1] ?? '';
    const port = Number(portMatch[2]);
    if (port < 1 || port > 65535) return false;
  }
  if (IPV6_HOST.test(host)) return true;
  if (host.length === 0 || host.length > 253) return false;
  return host.split('.').every((label) => HOST_LABEL.test(label));
}

function looksLikeHost(component: string): boolean {
  return (
    component.includes('.') || component.includes(':') || component === 'localhost' || /[A-Z]/.test(component)
  );
}

/** Parses a registry reference without applying any default registry. Throws InvalidReference. */
export function parseRegistryReference(input: string): ParsedRegistryReference {
  const ref = input.trim();
  if (ref.length === 0) throw invalid(input, 'it is empty');
  if (/\s/.test(ref)) throw invalid(input, 'it contains whitespace');

  let rest = ref;
  let digest: string | undefined;
  const at = rest.indexOf('@');
  if (at >= 0) {
    const d = rest.slice(at + 1);
    try {
      digest = parseDigest(d).digest;
    } catch (e) {
      throw invalid(input, (e as Error).message);
    }
    rest = rest.slice(0, at);
  }

  let tag: string | undefined;
  const lastSlash = rest.lastIndexOf('/');
  const lastColon = rest.lastIndexOf(':');
  if (lastColon > lastSlash) {
    tag = rest.slice(lastColon + 1);
    rest = rest.slice(0, lastColon);
    if (!TAG.test(tag)) throw invalid(input, `tag "${tag}" must match [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`);
  }

  let registry: string | undefined;
  const firstSlash = rest.indexOf('/');
  if (firstSlash >= 0 && looksLikeHost(rest.slice(0, firstSlash))) {
    registry = rest.slice(0, firstSlash).toLowerCase();
    rest = rest.slice(firstSlash + 1);
    if (!isValidRegistryHost(registry)) throw invalid(input, `"${registry}" is not a valid registry host`);
  } else if (firstSlash < 0 && looksLikeHost(rest) && /[A-Z]/.test(rest)) {
    throw invalid(input, 'repository names must be lower-case');
  }

  if (rest.length === 0) throw invalid(input, 'the repository name is empty');
  for (const component of rest.split('/')) {
    if (!PATH_COMPONENT.test(component)) {
      const why = /[A-Z]/.test(component)
        ? 'repository names must be lower-case'
        : `path component "${component}" must match [a-z0-9]+ joined by ".", "_", "__" or "-"`;
      throw invalid(input, why);
    }
  }
  if ((registry ? registry.length + 1 : 0) + rest.length > MAX_NAME_LENGTH) {
    throw invalid(input, `the name is longer than ${MAX_NAME_LENGTH} characters`);
  }
  const out: ParsedRegistryReference = { repository: rest };
  if (registry !== undefined) out.registry = registry;
  if (tag !== undefined) out.tag = tag;
  if (digest !== undefined) out.digest = digest;
  return out;
}

/**
 * Completes a parsed reference with a registry: Docker Hub's single-component names live under "library/",
 * and a reference with neither tag nor digest means ":latest".
 */
export function qualify(parsed: ParsedRegistryReference, registry: string): RegistryReference {
  const reg = registry.toLowerCase();
  let repository = parsed.repository;
  if (reg === DOCKER_HUB && !repository.includes('/')) repository = `library/${repository}`;
  const out: RegistryReference = { transport: 'registry', registry: reg, repository };
  if (parsed.tag !== undefined) out.tag = parsed.tag;
  if (parsed.digest !== undefined) out.digest = parsed.digest;
  if (out.tag === undefined && out.digest === undefined) out.tag = DEFAULT_TAG;
  return out;
}

function parseLocal(transport: 'oci' | 'oci-archive', input: string, body: string): LocalReference {
  // Like skopeo: the path ends at the first ":"; everything after it is the tag (ref.name), which may itself
  // contain ":".
  const colon = body.indexOf(':');
  const path = colon >= 0 ? body.slice(0, colon) : body;
  const tag = colon >= 0 ? body.slice(colon + 1) : undefined;
  if (path.length === 0) throw invalid(input, `${transport}: needs a path`);
  if (!isAbsolute(path)) throw invalid(input, `${transport}: path "${path}" must be absolute`);
  if (path.includes('\0')) throw invalid(input, 'the path contains a NUL byte');
  if (tag !== undefined && !OCI_REF_NAME.test(tag)) {
    throw invalid(input, `"${tag}" is not a valid OCI ref name (org.opencontainers.image.ref.name)`);
  }
  const clean = normalize(path).replace(/\/+$/, '') || '/';
  return tag === undefined ? { transport, path: clean } : { transport, path: clean, tag };
}

/** Parses an `oci:`/`oci-archive:` reference; undefined for anything else. */
export function parseLocalReference(input: string): LocalReference | undefined {
  const ref = input.trim();
  if (ref.startsWith('oci:')) return parseLocal('oci', input, ref.slice('oci:'.length));
  if (ref.startsWith('oci-archive:'))
    return parseLocal('oci-archive', input, ref.slice('oci-archive:'.length));
  return undefined;
}

/** Strips an optional "docker://" transport prefix (skopeo style). */
export function stripDockerTransport(input: string): string {
  const ref = input.trim();
  return ref.startsWith('docker://') ? ref.slice('docker://'.length) : ref;
}

/** "docker.io/library/ubuntu:24.04", "127.0.0.1:5000/x@sha256:…", "oci:/srv/images/base:latest". */
export function formatReference(ref: ImageReference): string {
  if (ref.transport === 'registry') {
    let s = `${ref.registry}/${ref.repository}`;
    if (ref.tag !== undefined) s += `:${ref.tag}`;
    if (ref.digest !== undefined) s += `@${ref.digest}`;
    return s;
  }
  return ref.tag === undefined ? `${ref.transport}:${ref.path}` : `${ref.transport}:${ref.path}:${ref.tag}`;
}

/** The same image pinned to a manifest digest (tag dropped). */
export function withDigest(ref: RegistryReference, digest: string): RegistryReference {
  return { transport: 'registry', registry: ref.registry, repository: ref.repository, digest };
}
