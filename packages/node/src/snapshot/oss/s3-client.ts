import { isIP } from 'node:net';
import { S3Client } from '@aws-sdk/client-s3';
import { invalidRequest } from '../errors.js';
import { credentialProcessProvider, splitCommandLine } from './credential-process.js';

export interface OssOptions {
  endpoint: string;
  bucket: string;
  region: string;
  /** Key prefix; a trailing '/' is added when missing. */
  prefix?: string;
  /** `auto` (default): path style for IP-literal and localhost endpoints, virtual-hosted otherwise. */
  addressingStyle?: 'virtual' | 'path' | 'auto';
  /** A command line (split without a shell) or an argv array printing AWS credential_process JSON. */
  credentialProcess?: string | readonly string[];
  accessKeyId?: string;
  accessKeySecret?: string;
  securityToken?: string;
  /** Lease of lock objects (default 30 s); a holder renews every third of it. */
  leaseMs?: number;
}

export function normalizePrefix(prefix: string | undefined): string {
  if (!prefix) return '';
  const p = prefix.replace(/^\/+/, '');
  return p === '' || p.endsWith('/') ? p : `${p}/`;
}

export function usesPathStyle(endpoint: URL, style: OssOptions['addressingStyle']): boolean {
  if (style === 'path') return true;
  if (style === 'virtual') return false;
  const host = endpoint.hostname.replace(/^\[|\]$/g, '');
  return isIP(host) !== 0 || host === 'localhost';
}

export function createS3Client(oss: OssOptions): S3Client {
  for (const key of ['endpoint', 'bucket', 'region'] as const) {
    if (!oss[key]) throw invalidRequest(`backend.oss.${key} is required for repository_backend = "oss"`);
  }
  let endpoint: URL;
  try {
    endpoint = new URL(oss.endpoint);
  } catch {
    throw invalidRequest(`backend.oss.endpoint ${JSON.stringify(oss.endpoint)} is not a URL`);
  }
  if (endpoint.protocol !== 'http:' && endpoint.protocol !== 'https:') {
    throw invalidRequest(`backend.oss.endpoint must be http(s) (got ${endpoint.protocol})`);
  }
  if (oss.addressingStyle !== undefined && !['virtual', 'path', 'auto'].includes(oss.addressingStyle)) {
    throw invalidRequest(
      `backend.oss.addressing_style must be virtual, path or auto (got ${oss.addressingStyle})`,
    );
  }
  return new S3Client({
    endpoint: endpoint.toString().replace(/\/$/, ''),
    region: oss.region,
    forcePathStyle: usesPathStyle(endpoint, oss.addressingStyle),
    credentials: resolveCredentials(oss),
    // Many S3-compatible servers reject the SDK's default CRC checksums; send them only where S3 requires one.
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
    maxAttempts: 3,
  });
}

function resolveCredentials(oss: OssOptions) {
  if (oss.credentialProcess !== undefined) {
    const argv =
      typeof oss.credentialProcess === 'string'
        ? splitCommandLine(oss.credentialProcess)
        : [...oss.credentialProcess];
    return credentialProcessProvider(argv);
  }
  if (oss.accessKeyId && oss.accessKeySecret) {
    return {
      accessKeyId: oss.accessKeyId,
      secretAccessKey: oss.accessKeySecret,
      ...(oss.securityToken ? { sessionToken: oss.securityToken } : {}),
    };
  }
  // No SDK default chain: it would probe instance-metadata addresses on the network.
  throw invalidRequest('backend.oss needs credential_process or access_key_id + access_key_secret');
}
