import { createHash, randomBytes } from 'node:crypto';
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { AGENTENV_MOUNT } from '@aenv/protocol';
import { run } from './run.js';
import type { Logger } from '../util/log.js';

/**
 * Node flags envd runs with (written to envd/node-flags, read by aenv-init). Keep envd's heap small. Lite mode
 * (no optimizing compiler, feedback vectors allocated lazily) saves ≈ 0.8 MB per idle sandbox and ≈ 4 MB once envd
 * has served a few dozen commands, at no cost to its latency or throughput, whose heavy work is native
 * (docs/envd.md "Memory and latency"). It has no WebAssembly; --no-expose-wasm says so without a warning.
 */
export const ENVD_NODE_FLAGS = [
  '--max-semi-space-size=1',
  '--max-old-space-size=64',
  '--v8-pool-size=1',
  '--lite-mode',
  '--no-expose-wasm',
];

/** Linked first into the sandbox's node so V8's heap pages share page tables (native/aenv-compact-mmap.c). */
export const COMPACT_MMAP_LIB = 'libaenv-compact-mmap.so';

/** Bump when the directory layout changes, so old dirs are not reused. */
const LAYOUT = 'aenv-tools-1';

export type ToolsLogger = Pick<Logger, 'info'>;

export interface EnsureToolsDirOptions {
  /** Dependencies root; the dir is built under <depsPath>/tools/<version>/. */
  depsPath: string;
  /** Node binary to ship (default: the one running the server). */
  nodeBinary?: string;
  logger?: ToolsLogger;
  /** The envd bundle (default: <@aenv/envd>/dist/envd.cjs, built by `npm run -w @aenv/envd bundle`). */
  bundlePath?: string;
}

export interface ToolsDir {
  dir: string;
  version: string;
}

/**
 * The @aenv/envd package of this checkout: the tools dir ships its build products (the bundle, the native
 * sources of aenv-init and the addon), never its code into the node.
 */
function envdPackageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const pkg = join(dir, 'packages', 'envd', 'package.json');
    if (existsSync(pkg) && (JSON.parse(readFileSync(pkg, 'utf8')) as { name?: string }).name === '@aenv/envd')
      return dirname(pkg);
    const parent = dirname(dir);
    if (parent === dir) throw new Error('cannot find the @aenv/envd package of this checkout');
    dir = parent;
  }
}

function nodeIncludeDir(nodeBinary: string): string {
  const candidates = [
    join(dirname(dirname(nodeBinary)), 'include', 'node'),
    '/usr/include/node',
    '/usr/local/include/node',
  ];
  const found = candidates.find((d) => existsSync(join(d, 'node_api.h')));
  if (!found) throw new Error(`node headers (node_api.h) not found in ${candidates.join(', ')}`);
  return found;
}

/** Shared libraries a binary needs (absolute paths from ldd), excluding the loader and the vdso. */
async function sharedLibs(binary: string): Promise<Map<string, string>> {
  const out = await run('ldd', [binary]);
  const libs = new Map<string, string>();
  for (const line of out.split('\n')) {
    if (line.includes('not found')) throw new Error(`${binary}: missing library: ${line.trim()}`);
    const m = /^\s*(\S+)\s+=>\s+(\/\S+)/.exec(line);
    if (m?.[1] && m[2]) libs.set(m[1], m[2]);
  }
  return libs;
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Removes half-built dirs of builders that died (crash at any point must not leak). */
function removeStale(toolsRoot: string): void {
  for (const name of readdirSync(toolsRoot)) {
    const m = /^\.(?:stage|build)-(?:.*-)?(\d+)-[0-9a-f]{8}[A-Za-z0-9]*$/.exec(name);
    if (m && !pidAlive(Number(m[1]))) rmSync(join(toolsRoot, name), { recursive: true, force: true });
  }
}

function sha256(...parts: (string | Buffer)[]): string {
  const h = createHash('sha256');
  for (const p of parts) h.update(p).update('\0');
  return h.digest('hex');
}

/**
 * Builds (once) the read-only tools directory mounted at /agentenv in every sandbox:
 *   bin/node        host node, patchelf'd: interpreter /agentenv/lib/ld-linux…, rpath /agentenv/lib
 *   bin/aenv-init   static PID 1 + exec-as helper
 *   lib/            node's shared libraries and the loader
 *   envd/envd.cjs   the envd bundle, envd/aenv_native.node, envd/node_modules/node-pty, envd/node-flags
 *   VERSION
 * The version is a short hash of the node version, the bundle and the native binaries, so any change
 * yields a new directory. Built in a temp dir and renamed into place, so a crash never leaves a
 * half-built version behind and concurrent builders agree.
 */
export async function ensureToolsDir(opts: EnsureToolsDirOptions): Promise<ToolsDir> {
  const nodeBinary = opts.nodeBinary ?? process.execPath;
  const pkgRoot = envdPackageRoot();
  const bundlePath = opts.bundlePath ?? join(pkgRoot, 'dist', 'envd.cjs');
  if (!existsSync(bundlePath))
    throw new Error(`envd bundle ${bundlePath} is missing: run \`npm run -w @aenv/envd bundle\``);
  const require = createRequire(join(pkgRoot, 'package.json'));
  const ptyRoot = dirname(require.resolve('node-pty/package.json'));
  const ptyNode = join(ptyRoot, 'build', 'Release', 'pty.node');
  if (!existsSync(ptyNode))
    throw new Error(`node-pty native module ${ptyNode} is missing (was node-pty built?)`);

  const toolsRoot = join(opts.depsPath, 'tools');
  mkdirSync(toolsRoot, { recursive: true });
  // Sandbox uids pass through it to the version dir (search only, like <deps> itself); mkdir's mode would be
  // cut by the server's umask (077), which left a first start on a fresh host unable to start any sandbox.
  chmodSync(toolsRoot, 0o711);
  removeStale(toolsRoot);

  const tag = `${process.pid}-${randomBytes(4).toString('hex')}`;
  const native = await buildNative(toolsRoot, pkgRoot, nodeBinary, tag);
  const nodeVersion =
    nodeBinary === process.execPath ? process.version : (await run(nodeBinary, ['--version'])).trim();
  const version = sha256(
    LAYOUT,
    nodeVersion,
    AGENTENV_MOUNT,
    ENVD_NODE_FLAGS.join(' '),
    readFileSync(bundlePath),
    readFileSync(native.initBin),
    readFileSync(native.addon),
    readFileSync(native.compactMmap),
    readFileSync(ptyNode),
  ).slice(0, 12);
  const finalDir = join(toolsRoot, version);
  if (existsSync(join(finalDir, 'VERSION'))) return { dir: finalDir, version };

  opts.logger?.info({ version, dir: finalDir }, 'building sandbox tools dir');
  const stage = join(toolsRoot, `.stage-${version}-${tag}`);
  try {
    await assemble(stage, { ...native, nodeBinary, bundlePath, ptyRoot, ptyNode, version });
    try {
      renameSync(stage, finalDir);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if ((code !== 'ENOTEMPTY' && code !== 'EEXIST') || !existsSync(join(finalDir, 'VERSION'))) throw err;
    }
  } finally {
    rmSync(stage, { recursive: true, force: true });
  }
  return { dir: finalDir, version };
}

/**
 * Compiles aenv-init (static) and aenv_native.node with the host gcc, cached under
 * <tools>/.native-<hash of sources, compiler and node headers> so restarts do not recompile.
 */
async function buildNative(
  toolsRoot: string,
  pkgRoot: string,
  nodeBinary: string,
  tag: string,
): Promise<NativeParts> {
  const native = join(pkgRoot, 'native');
  const includeDir = nodeIncludeDir(nodeBinary);
  const key = sha256(
    readFileSync(join(native, 'aenv-init.c')),
    readFileSync(join(native, 'aenv_native.c')),
    readFileSync(join(native, 'aenv-compact-mmap.c')),
    await run('gcc', ['--version']),
    readFileSync(join(includeDir, 'node_api.h')),
    readFileSync(join(includeDir, 'js_native_api.h')),
  ).slice(0, 16);
  const cacheDir = join(toolsRoot, `.native-${key}`);
  const result = {
    initBin: join(cacheDir, 'aenv-init'),
    addon: join(cacheDir, 'aenv_native.node'),
    compactMmap: join(cacheDir, COMPACT_MMAP_LIB),
  };
  if (existsSync(join(cacheDir, 'DONE'))) return result;
  const buildDir = mkdtempSync(join(toolsRoot, `.build-x-${tag}`));
  try {
    // -Os -s: small files, read by every sandbox start; -Wall: the sources build without warnings.
    const gcc = (out: string, src: string, flags: string[]) =>
      run('gcc', [...flags, '-Os', '-s', '-Wall', '-o', join(buildDir, out), join(native, src)]);
    await gcc('aenv-init', 'aenv-init.c', ['-static']);
    await gcc('aenv_native.node', 'aenv_native.c', ['-shared', '-fPIC', '-pthread', `-I${includeDir}`]);
    await gcc(COMPACT_MMAP_LIB, 'aenv-compact-mmap.c', ['-shared', '-fPIC']);
    writeFileSync(join(buildDir, 'DONE'), '');
    try {
      renameSync(buildDir, cacheDir);
    } catch (err) {
      if (!existsSync(join(cacheDir, 'DONE'))) throw err;
    }
  } finally {
    rmSync(buildDir, { recursive: true, force: true });
  }
  return result;
}

interface NativeParts {
  initBin: string;
  addon: string;
  compactMmap: string;
}

interface AssembleInputs extends NativeParts {
  nodeBinary: string;
  bundlePath: string;
  ptyRoot: string;
  ptyNode: string;
  version: string;
}

async function assemble(stage: string, i: AssembleInputs): Promise<void> {
  const lib = join(stage, 'lib');
  const bin = join(stage, 'bin');
  const envd = join(stage, 'envd');
  const pty = join(envd, 'node_modules', 'node-pty');
  for (const d of [stage, lib, bin, envd, join(pty, 'lib'), join(pty, 'build', 'Release')])
    mkdirSync(d, { recursive: true, mode: 0o755 });

  const mountedLib = `${AGENTENV_MOUNT}/lib`;
  const interpreter = (await run('patchelf', ['--print-interpreter', i.nodeBinary])).trim();
  const loaderName = basename(interpreter);
  copyFileSync(interpreter, join(lib, loaderName));
  const libs = new Map([...(await sharedLibs(i.nodeBinary)), ...(await sharedLibs(i.ptyNode))]);
  for (const [name, path] of libs) copyFileSync(path, join(lib, name));
  copyFileSync(i.compactMmap, join(lib, COMPACT_MMAP_LIB));

  const node = join(bin, 'node');
  copyFileSync(i.nodeBinary, node);
  await run('patchelf', [
    '--set-interpreter',
    `${mountedLib}/${loaderName}`,
    '--force-rpath',
    '--set-rpath',
    mountedLib,
    node,
  ]);
  // A call of its own: patchelf 0.14 combined with --set-rpath writes the library's name as the rpath.
  await run('patchelf', ['--add-needed', COMPACT_MMAP_LIB, node]);
  copyFileSync(i.initBin, join(bin, 'aenv-init'));

  copyFileSync(i.bundlePath, join(envd, 'envd.cjs'));
  copyFileSync(i.addon, join(envd, 'aenv_native.node'));
  writeFileSync(join(envd, 'node-flags'), `${ENVD_NODE_FLAGS.join('\n')}\n`);
  copyFileSync(join(i.ptyRoot, 'package.json'), join(pty, 'package.json'));
  for (const f of readdirSync(join(i.ptyRoot, 'lib'))) {
    if (f.endsWith('.js') && !f.endsWith('.test.js'))
      copyFileSync(join(i.ptyRoot, 'lib', f), join(pty, 'lib', f));
  }
  const ptyNode = join(pty, 'build', 'Release', 'pty.node');
  copyFileSync(i.ptyNode, ptyNode);
  for (const so of [ptyNode, join(envd, 'aenv_native.node')])
    await run('patchelf', ['--force-rpath', '--set-rpath', mountedLib, so]);

  // World-readable: the dir is bind-mounted read-only into user-namespaced sandboxes.
  for (const f of readdirSync(lib)) chmodSync(join(lib, f), 0o755);
  chmodSync(node, 0o755);
  chmodSync(join(bin, 'aenv-init'), 0o755);
  for (const f of ['envd.cjs', 'node-flags']) chmodSync(join(envd, f), 0o644);
  chmodSync(join(envd, 'aenv_native.node'), 0o755);
  chmodSync(ptyNode, 0o755);
  writeFileSync(join(stage, 'VERSION'), `${i.version}\n`, { mode: 0o644 });
}
