// The files a COPY/ADD step takes from the build context (docs/cli.md "build"): chosen as Docker does (a path,
// a directory's whole tree, or a glob; `.dockerignore` honoured), hashed as the e2b SDK hashes them (the
// step's `filesHash`), packed as a tar.gz and uploaded through the link the server gives for that hash.
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { lstat, mkdtemp, readFile, readdir, readlink, realpath, rm, stat } from 'node:fs/promises';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { tmpdir } from 'node:os';
import { join, posix, sep } from 'node:path';
import ignore, { type Ignore } from 'ignore';
import { create as createTar } from 'tar';
import { glob, isDynamicPattern } from 'tinyglobby';
import { DockerfileError, type CopyStep } from './dockerfile.js';

/** The `.dockerignore` of a context (none: nothing ignored). */
export async function readDockerignore(contextDir: string): Promise<Ignore> {
  // The package is CommonJS typed as ESM: its function is also its `default`.
  const ig = ignore.default();
  try {
    ig.add(await readFile(join(contextDir, '.dockerignore'), 'utf8'));
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
  }
  return ig;
}

export interface CopySources {
  step: CopyStep;
  /** Context-relative POSIX paths, directories included, sorted. */
  paths: string[];
  filesHash: string;
}

const inside = (root: string, p: string) => p === root || p.startsWith(root + sep);

/** Every entry under `dir` (not following symbolic links), context-relative. */
async function walk(contextDir: string, dir: string, out: string[]): Promise<void> {
  for (const d of await readdir(join(contextDir, dir), { withFileTypes: true })) {
    const rel = dir === '.' ? d.name : `${dir}/${d.name}`;
    out.push(rel);
    if (d.isDirectory()) await walk(contextDir, rel, out);
  }
}

/** The files of one COPY step; a source that matches nothing, or reaches out through a link, is an error. */
export async function copySources(contextDir: string, step: CopyStep, ig: Ignore): Promise<CopySources> {
  const root = await realpath(contextDir);
  const what = `COPY ${step.src}`;
  let matched: string[];
  if (isDynamicPattern(step.src)) {
    matched = (
      await glob(step.src, {
        cwd: root,
        dot: true,
        onlyFiles: false,
        expandDirectories: false,
        followSymbolicLinks: false,
      })
    ).map((p) => p.replace(/\/+$/, ''));
  } else {
    try {
      await lstat(join(root, step.src));
      matched = [step.src];
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
      matched = [];
    }
  }
  if (!matched.length) {
    throw new DockerfileError(
      step.line,
      `${what}: no such file or directory in the build context ${contextDir}`,
      'missing',
    );
  }
  const all = new Set<string>();
  for (const m of matched) {
    // A directory on the way (`link/secret`) may be a symbolic link out of the context: refuse that.
    const parent = await realpath(join(root, posix.dirname(m)));
    if (!inside(root, parent)) {
      throw new DockerfileError(
        step.line,
        `${what}: ${m} is outside the build context (through a symbolic link)`,
      );
    }
    if (m !== '.') all.add(m);
    const st = await lstat(join(root, m));
    if (st.isDirectory()) {
      const under: string[] = [];
      await walk(root, m, under);
      for (const u of under) all.add(u);
    }
  }
  const paths = [...all].filter((p) => !ig.ignores(p)).sort();
  if (!paths.length) {
    throw new DockerfileError(step.line, `${what}: every file of it is excluded by .dockerignore`);
  }
  return { step, paths, filesHash: await hashFiles(root, step, paths) };
}

/** sha256 over the step and each entry's path, mode, size and content (the link target of a link). */
async function hashFiles(root: string, step: CopyStep, paths: string[]): Promise<string> {
  const hash = createHash('sha256');
  hash.update(`COPY ${step.src} ${step.dest}`);
  for (const p of paths) {
    const full = join(root, p);
    const st = await lstat(full);
    hash.update(p);
    hash.update(st.mode.toString());
    hash.update(st.size.toString());
    if (st.isSymbolicLink()) hash.update(await readlink(full));
    else if (st.isFile()) hash.update(await readFile(full));
  }
  return hash.digest('hex');
}

/** Packs `paths` (context-relative) into a tar.gz in a private temporary directory. */
export async function packFiles(
  contextDir: string,
  paths: string[],
): Promise<{ path: string; size: number; cleanup: () => Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), 'aenv-build-'));
  const cleanup = () => rm(dir, { recursive: true, force: true });
  try {
    const file = join(dir, 'files.tar.gz');
    // Owners and times are not the host's business in the sandbox: COPY sets the owner (--chown, else USER).
    await createTar({ gzip: true, cwd: contextDir, noDirRecurse: true, portable: true, file }, paths);
    return { path: file, size: (await stat(file)).size, cleanup };
  } catch (e) {
    await cleanup();
    throw e;
  }
}

/** PUTs a file to an upload link (the link carries its own authorisation: no API key is sent). */
export function putFile(url: string, path: string, size: number, userAgent: string): Promise<void> {
  const u = new URL(url);
  const request = u.protocol === 'https:' ? httpsRequest : httpRequest;
  return new Promise((resolve, reject) => {
    let answered = false;
    const req = request(
      u,
      {
        method: 'PUT',
        headers: {
          'content-length': String(size),
          'content-type': 'application/gzip',
          'user-agent': userAgent,
        },
      },
      (res) => {
        answered = true;
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          if (res.statusCode === 200) return resolve();
          const body = Buffer.concat(chunks).toString();
          let message = body.slice(0, 300);
          try {
            message = (JSON.parse(body) as { message?: string }).message ?? message;
          } catch {
            // Not the documented error shape: its text, cut short.
          }
          reject(new UploadFailed(res.statusCode ?? 0, message));
        });
        res.on('error', reject);
      },
    );
    // A refusal (413) comes before the body was read and the server closes: the write may then fail, but
    // the answer says why. A node that cut the connection without an answer it could deliver says nothing.
    req.on('error', (e) => {
      if (answered) return;
      const code = (e as NodeJS.ErrnoException).code;
      if (code === 'EPIPE' || code === 'ECONNRESET') reject(new UploadCut(size, e));
      else reject(e);
    });
    const body = createReadStream(path);
    body.on('error', (e) => req.destroy(e));
    body.pipe(req);
  });
}

export class UploadCut extends Error {
  constructor(size: number, cause: Error) {
    super(
      `the node closed the connection during the upload of the build files (${size} bytes) without an answer ` +
        `(${cause.message}): it refused them before reading them, most likely as larger than its ` +
        '[template_build].max_upload_mb',
      { cause },
    );
    this.name = 'UploadCut';
  }
}

export class UploadFailed extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(`the upload of the build files was refused (HTTP ${status}): ${message}`);
    this.name = 'UploadFailed';
  }
}
