// Attack class "a hostile bucket / shared directory", docs/security.md: whoever can write the snapshot repository
// (an S3 bucket, a shared posix_fs directory) but does not hold the record signing secret must not get anything
// restored as root. A real `aenv server` per backend (posix_fs; S3 on the moto server at 127.0.0.1:9000) builds a
// template; the test then tampers with its stored record, commit marker, disk layer and alias, and launches it
// with the e2b SDK before any launch could have cached it: each tampering is refused with a clear error, the base
// template keeps working, and the restored template launches.
import {
  DeleteObjectCommand,
  GetObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
} from '@aws-sdk/client-s3';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Sandbox } from 'e2b';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { endNode, startServer, useSdk, type TestServer } from '../e2e/harness.js';

const BASE = 'oci:/var/cache/aenv/images/base:latest';
const RUN = `r${Date.now().toString(36)}`;
const SECRET = 'repository-trust-test-secret';

type Ns = 'records' | 'commits' | 'aliases';
interface LayerRef {
  digest: string;
  size: number;
  mediaType: string;
}
type Doc = Record<string, unknown> & { committed?: { layers: LayerRef[]; context: { envVars: object } } };

/** Raw access to a repository's storage, as its hostile writer has it. */
interface Storage {
  readDoc(ns: Ns, name: string): Promise<string>;
  writeDoc(ns: Ns, name: string, text: string): Promise<void>;
  /** A layer's stored object, to put it back later exactly. */
  saveLayer(digest: string): Promise<() => Promise<void>>;
  /** Stores `content` as the layer `digest` (with whatever metadata makes it look genuine). */
  writeLayer(digest: string, content: Buffer): Promise<void>;
  cleanup(): Promise<void>;
}

/** A disk archive of an attacker's choosing: a valid tar in the format of a template's disk. */
function evilDiskTar(): Buffer {
  const dir = mkdtempSync(join(tmpdir(), 'simg-evil-'));
  try {
    mkdirSync(join(dir, 'etc'));
    writeFileSync(join(dir, 'etc', 'ld.so.preload'), '/tmp/evil.so\n');
    execFileSync('tar', ['--numeric-owner', '-C', dir, '-cf', join(dir, 'evil.tar'), 'etc']);
    return readFileSync(join(dir, 'evil.tar'));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function defineTrustSuite(
  label: string,
  nodeName: string,
  toml: () => string,
  storage: (server: TestServer) => Storage,
): void {
  describe(`a hostile writer of the ${label} repository (${nodeName})`, () => {
    let server: TestServer;
    let store: Storage;
    let id = '';
    const alias = `${RUN}-${nodeName}-t`;
    const marker = `${RUN}-${nodeName}`;
    let baseId = '';
    const sandboxes: Sandbox[] = [];

    beforeAll(async () => {
      server = await startServer({ name: nodeName, toml: toml() });
      useSdk(server);
      store = storage(server);
      const created = await server.api('POST', '/v3/templates', { name: alias, cpuCount: 1, memoryMB: 512 });
      id = created.body.templateID as string;
      const r = await server.api('POST', `/v2/templates/${id}/builds/${id}`, {
        fromImage: BASE,
        steps: [{ type: 'RUN', args: [`echo ${marker} > /home/user/trust-marker`] }],
      });
      expect(r.status).toBe(202);
      for (let i = 0; i < 900; i++) {
        const s = await server.api('GET', `/templates/${id}/builds/${id}/status`);
        if (s.body.status === 'ready') break;
        if (s.body.status === 'error') throw new Error(`build failed: ${JSON.stringify(s.body.reason)}`);
        await new Promise((res) => setTimeout(res, 200));
      }
      const list = await server.api('GET', '/templates');
      baseId = (list.body as { templateID: string; aliases: string[] }[]).find((t) =>
        t.aliases.includes('base'),
      )!.templateID;
    });

    afterAll(async () => {
      for (const s of sandboxes) await s.kill().catch(() => {});
      if (server) {
        await server.api('DELETE', `/templates/${id}`);
        expect(await endNode(server)).toEqual({ stray: [], exitCode: 0 });
      }
      await store?.cleanup();
    });

    const doc = async (ns: 'records' | 'commits') => JSON.parse(await store.readDoc(ns, id)) as Doc;
    const put = (ns: Ns, name: string, v: unknown) =>
      store.writeDoc(ns, name, typeof v === 'string' ? v : `${JSON.stringify(v, null, 2)}\n`);

    /** Tampers, expects a launch of the template to fail with `message`, then puts everything back. */
    async function refused(tamper: () => Promise<(() => Promise<void>) | void>, message: RegExp) {
      const saved = {
        records: await store.readDoc('records', id),
        commits: await store.readDoc('commits', id),
      };
      const undo = await tamper();
      await expect(Sandbox.create(alias, { timeoutMs: 30_000 })).rejects.toThrow(message);
      await put('records', id, saved.records);
      await put('commits', id, saved.commits);
      await undo?.();
    }

    it('signs what it stores', async () => {
      for (const ns of ['records', 'commits'] as const)
        expect((await doc(ns)).signature).toMatchObject({ alg: 'hmac-sha256' });
    });

    it('refuses a changed record and a changed commit marker', async () => {
      await refused(async () => {
        const d = await doc('records');
        (d.resources as { memoryMB: number }).memoryMB = 65536;
        await put('records', id, d);
      }, /does not match its signature/);
      await refused(async () => {
        const d = await doc('commits');
        (d.committed!.context.envVars as Record<string, string>).LD_PRELOAD = '/tmp/evil.so';
        await put('commits', id, d);
      }, /does not match its signature/);
      await refused(async () => {
        const d = await doc('commits');
        (d.committed as unknown as { extra: object }).extra = { lowerDirs: ['/'] };
        await put('commits', id, d);
      }, /does not match its signature/);
    });

    it('refuses a swapped disk layer, and one swapped together with its digest in the marker', async () => {
      const layer = (await doc('commits')).committed!.layers[0]!;
      const evil = evilDiskTar();
      const evilRef = {
        ...layer,
        digest: `sha256:${createHash('sha256').update(evil).digest('hex')}`,
        size: evil.length,
      };
      // The attacker's own blob, named by its real digest, referenced from the marker: the signature fails.
      await store.writeLayer(evilRef.digest, evil);
      await refused(async () => {
        const d = await doc('commits');
        d.committed!.layers = [evilRef];
        await put('commits', id, d);
      }, /does not match its signature/);
      // The genuine layer's bytes replaced: the digest in the signed marker fails the fetch.
      await refused(async () => {
        const restore = await store.saveLayer(layer.digest);
        await store.writeLayer(layer.digest, evil);
        return restore;
      }, /corrupt|changed after it was verified|IntegrityMismatch/);
    });

    it('refuses an unsigned record, a record of another key, and a repointed alias', async () => {
      await refused(async () => {
        const d = await doc('commits');
        delete d.signature;
        await put('commits', id, d);
      }, /is not signed/);
      await refused(async () => {
        const d = await doc('records');
        (d.signature as { keyId: string }).keyId = '0123456789abcdef';
        await put('records', id, d);
      }, /signed with another key 0123456789abcdef/);
      // The template's name pointed at the base template's (genuine, signed) record.
      await put('aliases', alias, JSON.stringify(baseId));
      await expect(Sandbox.create(alias, { timeoutMs: 30_000 })).rejects.toThrow(/points at snapshot/);
      await put('aliases', alias, JSON.stringify(id));
    });

    it('nothing else was affected: the base template launches, and the restored template launches intact', async () => {
      const base = await Sandbox.create('base', { timeoutMs: 60_000 });
      sandboxes.push(base);
      expect((await base.commands.run('echo ok')).stdout.trim()).toBe('ok');
      const listed = (await server.api('GET', '/templates')).body as { templateID: string }[];
      expect(listed.map((t) => t.templateID)).toEqual(expect.arrayContaining([id, baseId]));
      const sbx = await Sandbox.create(alias, { timeoutMs: 60_000 });
      sandboxes.push(sbx);
      expect((await sbx.commands.run('cat /home/user/trust-marker')).stdout.trim()).toBe(marker);
      expect(await sbx.files.exists('/etc/ld.so.preload')).toBe(false);
    });
  });
}

// ---- posix_fs: the node's own snapshot store, written behind its back ----

defineTrustSuite(
  'posix_fs',
  'simg3',
  () => `[snapshot]\nrecord_signing_secret = "${SECRET}"\n`,
  (server) => {
    const root = join(server.home, 'snapshot-store', 'repository');
    const docPath = (ns: Ns, name: string) =>
      ns === 'records'
        ? join(root, 'catalog/records', `${name}.json`)
        : ns === 'aliases'
          ? join(root, 'catalog/aliases', name)
          : join(root, 'snapshots', name, 'commit');
    const layerPath = (digest: string) => join(root, 'layers/sha256', digest.slice('sha256:'.length));
    return {
      readDoc: async (ns, name) => readFileSync(docPath(ns, name), 'utf8'),
      writeDoc: async (ns, name, text) => writeFileSync(docPath(ns, name), text),
      async saveLayer(digest) {
        const bytes = readFileSync(layerPath(digest));
        return async () => {
          rmSync(layerPath(digest), { force: true });
          writeFileSync(layerPath(digest), bytes, { mode: 0o444 });
        };
      },
      async writeLayer(digest, content) {
        rmSync(layerPath(digest), { force: true });
        writeFileSync(layerPath(digest), content);
      },
      // The node's home stays for the next run; its records are signed and valid.
      cleanup: async () => {},
    };
  },
);

// ---- oss: an S3 bucket (moto on loopback) the node shares ----

const s3 = {
  endpoint: process.env.AENV_TEST_S3_ENDPOINT ?? 'http://127.0.0.1:9000',
  bucket: process.env.AENV_TEST_S3_BUCKET ?? 'aenv-test',
  region: process.env.AENV_TEST_S3_REGION ?? 'us-east-1',
  accessKeyId: process.env.AENV_TEST_S3_ACCESS_KEY ?? 'aenvtest',
  secretAccessKey: process.env.AENV_TEST_S3_SECRET_KEY ?? 'aenvtestsecret',
};
const prefix = `simg4-${RUN}/`;
const client = new S3Client({
  endpoint: s3.endpoint,
  region: s3.region,
  forcePathStyle: true,
  credentials: { accessKeyId: s3.accessKeyId, secretAccessKey: s3.secretAccessKey },
  requestChecksumCalculation: 'WHEN_REQUIRED',
  responseChecksumValidation: 'WHEN_REQUIRED',
});

defineTrustSuite(
  'oss (S3)',
  'simg4',
  () =>
    [
      '[snapshot]',
      'repository_backend = "oss"',
      `record_signing_secret = "${SECRET}"`,
      '[backend.oss]',
      `endpoint = "${s3.endpoint}"`,
      `bucket = "${s3.bucket}"`,
      `region = "${s3.region}"`,
      'addressing_style = "path"',
      `prefix = "${prefix}"`,
      `access_key_id = "${s3.accessKeyId}"`,
      `access_key_secret = "${s3.secretAccessKey}"`,
    ].join('\n'),
  () => {
    const docKey = (ns: Ns, name: string) => `${prefix}catalog/${ns}/${name}.json`;
    const layerKey = (digest: string) => `${prefix}layers/sha256/${digest.slice('sha256:'.length)}`;
    const get = async (key: string) => {
      const o = await client.send(new GetObjectCommand({ Bucket: s3.bucket, Key: key }));
      return { body: Buffer.from(await o.Body!.transformToByteArray()), metadata: o.Metadata ?? {} };
    };
    return {
      readDoc: async (ns, name) => (await get(docKey(ns, name))).body.toString('utf8'),
      writeDoc: async (ns, name, text) =>
        void (await client.send(
          new PutObjectCommand({ Bucket: s3.bucket, Key: docKey(ns, name), Body: text }),
        )),
      async saveLayer(digest) {
        const saved = await get(layerKey(digest));
        return async () =>
          void (await client.send(
            new PutObjectCommand({
              Bucket: s3.bucket,
              Key: layerKey(digest),
              Body: saved.body,
              Metadata: saved.metadata,
            }),
          ));
      },
      async writeLayer(digest, content) {
        await client.send(
          new PutObjectCommand({
            Bucket: s3.bucket,
            Key: layerKey(digest),
            Body: content,
            Metadata: {
              'aenv-digest': digest,
              'aenv-codec': 'none',
              'aenv-raw-size': String(content.length),
              'aenv-compressed-size': String(content.length),
            },
          }),
        );
      },
      async cleanup() {
        let token: string | undefined;
        do {
          const r = await client.send(
            new ListObjectsV2Command({ Bucket: s3.bucket, Prefix: prefix, ContinuationToken: token }),
          );
          for (const o of r.Contents ?? [])
            await client.send(new DeleteObjectCommand({ Bucket: s3.bucket, Key: o.Key! }));
          token = r.IsTruncated ? r.NextContinuationToken : undefined;
        } while (token);
      },
    };
  },
);

afterAll(() => client.destroy());
