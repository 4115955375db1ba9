// scripts/install.sh, the native install: run for real into a temporary prefix, sysconfdir and unit
// dir (--no-activate: no user, no systemctl, no host setup), from a small built-looking tree. The units
// it writes must pass `systemd-analyze verify` silently (which also checks that ExecStart exists) and the
// scheduler's and gateway's hardening must rate "OK" in `systemd-analyze security --offline`.
import { spawnSync, type SpawnSyncReturns } from 'node:child_process';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '@aenv/config';

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', '..');
const INSTALL = join(REPO, 'scripts', 'install.sh');
const UNITS = ['aenv-server.service', 'aenv-scheduler.service', 'aenv-gateway.service'];

let root: string;
let src: string;
let dirs: { prefix: string; etc: string; units: string; home: string };

function install(...args: string[]): SpawnSyncReturns<string> {
  return spawnSync(
    INSTALL,
    [
      '--source',
      src,
      '--prefix',
      dirs.prefix,
      '--sysconfdir',
      dirs.etc,
      '--unitdir',
      dirs.units,
      '--node-home',
      dirs.home,
      '--node',
      process.execPath,
      '--no-activate',
      '--no-host-setup',
      ...args,
    ],
    { encoding: 'utf8' },
  );
}

function ok(r: SpawnSyncReturns<string>): string {
  expect(r.status, `${r.stdout}\n${r.stderr}`).toBe(0);
  return r.stdout;
}

const verify = (...files: string[]) =>
  spawnSync('systemd-analyze', ['verify', '--man=no', ...files], { encoding: 'utf8' });

/** Every file below a directory, with its mode. */
function listing(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => join(e.parentPath, e.name).slice(dir.length))
    .sort();
}

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'aenv-install-'));
  chmodSync(root, 0o755); // the dry run reads the source tree as nobody
  // A built checkout as install.sh reads it: manifests, dist, the envd bundle.
  src = join(root, 'src');
  for (const d of ['packages/cli/dist', 'packages/envd/dist', 'config'])
    mkdirSync(join(src, d), { recursive: true });
  writeFileSync(join(src, 'package.json'), '{"name":"aenv","private":true}\n');
  writeFileSync(join(src, 'packages/cli/package.json'), '{"name":"@aenv/cli","type":"module"}\n');
  writeFileSync(
    join(src, 'packages/cli/dist/main.js'),
    'console.log(JSON.stringify(process.argv.slice(2)));\n',
  );
  writeFileSync(join(src, 'packages/envd/dist/envd.cjs'), '\n');
  writeFileSync(join(src, 'config/default.toml'), '\n');
  dirs = {
    prefix: join(root, 'opt', 'aenv'),
    etc: join(root, 'etc'),
    units: join(root, 'etc', 'systemd', 'system'),
    home: join(root, 'var', 'lib', 'aenv'),
  };
});

afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('scripts/install.sh', () => {
  it('--dry-run prints the whole plan and changes nothing, without root', () => {
    const args = ['--dry-run', '--source', src, '--prefix', dirs.prefix, '--sysconfdir', dirs.etc];
    args.push('--unitdir', dirs.units, '--node-home', dirs.home, '--node', process.execPath);
    const setpriv = ['--reuid=65534', '--regid=65534', '--clear-groups'];
    const asNobody = spawnSync('setpriv', [...setpriv, 'true']).status === 0;
    const plan = (extra: string[]) =>
      ok(
        asNobody
          ? spawnSync('setpriv', [...setpriv, INSTALL, ...args, ...extra], { encoding: 'utf8' })
          : install('--dry-run', ...extra),
      )
        .trim()
        .split('\n');
    expect(plan(['--no-activate', '--no-host-setup'])).toEqual([
      `would copy    ${src} -> ${dirs.prefix}/lib/aenv (runtime files, production dependencies)`,
      `would create  ${dirs.prefix}/bin/aenv`,
      `would create  ${dirs.etc}/default/aenv`,
      `would create  ${dirs.etc}/aenv/secrets.env`,
      `would create  ${dirs.etc}/aenv/node.toml`,
      `would create  ${dirs.etc}/aenv/scheduler.json`,
      `would create  ${dirs.etc}/aenv/gateway.json`,
      `would create  ${dirs.units}/aenv-server.service`,
      `would create  ${dirs.units}/aenv-scheduler.service`,
      `would create  ${dirs.units}/aenv-gateway.service`,
    ]);
    // With host setup and activation: the setup scripts, the user and systemctl (or why not).
    const full = plan([]);
    expect(full).toContain(`would run     ${src}/scripts/setup-host.sh`);
    expect(full).toContain(`would run     ${src}/scripts/build-base-image.sh`);
    expect(full.some((l) => /^would (keep {4}user aenv|run {5}useradd --system .* aenv)$/.test(l))).toBe(
      true,
    );
    expect(full.at(-1)).toMatch(
      existsSync('/run/systemd/system')
        ? /^would run {5}systemctl restart aenv-server.service aenv-scheduler.service aenv-gateway.service$/
        : /^would skip {4}systemctl: systemd is not running here/,
    );
    // A component subset plans only its own files.
    const gatewayOnly = plan(['--no-activate', '--no-host-setup', '--components', 'gateway']);
    expect(gatewayOnly.filter((l) => /\.service$|\.json$|\.toml$/.test(l))).toEqual([
      `would create  ${dirs.etc}/aenv/gateway.json`,
      `would create  ${dirs.units}/aenv-gateway.service`,
    ]);
    expect(existsSync(join(root, 'opt')) || existsSync(dirs.etc)).toBe(false);
  });

  it('installs the tree, a wrapper, private secrets, the configs and one unit per process', () => {
    // A node that ran before keeps its managed secrets; the install takes them over.
    mkdirSync(join(dirs.home, 'secrets'), { recursive: true, mode: 0o700 });
    const seed = 'ab'.repeat(32);
    writeFileSync(join(dirs.home, 'secrets', 'sandbox-access-token-hash-seed'), `${seed}\n`, { mode: 0o600 });
    const out = ok(install());
    expect(out).toMatch(/^create {2}.*aenv-gateway\.service$/m);

    const run = spawnSync(join(dirs.prefix, 'bin', 'aenv'), ['server', '--x'], { encoding: 'utf8' });
    expect(run.stdout.trim()).toBe('["server","--x"]');
    expect(statSync(join(dirs.prefix, 'bin', 'aenv')).mode & 0o777).toBe(0o755);
    expect(existsSync(join(dirs.prefix, 'lib', 'aenv', 'packages', 'envd', 'dist', 'envd.cjs'))).toBe(true);

    const secretsFile = join(dirs.etc, 'aenv', 'secrets.env');
    expect(statSync(secretsFile).mode & 0o777).toBe(0o600);
    const secrets = Object.fromEntries(
      readFileSync(secretsFile, 'utf8')
        .split('\n')
        .filter((l) => l && !l.startsWith('#'))
        .map((l) => l.split('=', 2) as [string, string]),
    );
    expect(Object.keys(secrets)).toEqual([
      'AENV_API_KEY',
      'AENV_SANDBOX_ACCESS_TOKEN_HASH_SEED',
      'AENV_SNAPSHOT_RECORD_SIGNING_SECRET',
      'AENV_SECRETS_ENCRYPTION_KEY',
    ]);
    expect(secrets.AENV_API_KEY).toMatch(/^e2b_[0-9a-f]{64}$/);
    expect(secrets.AENV_SANDBOX_ACCESS_TOKEN_HASH_SEED).toBe(seed);
    expect(secrets.AENV_SNAPSHOT_RECORD_SIGNING_SECRET).toMatch(/^[0-9a-f]{64}$/);
    expect(secrets.AENV_SECRETS_ENCRYPTION_KEY).toMatch(/^[0-9a-f]{64}$/);

    // The node config and the environment it runs with load without a warning.
    const node = loadConfig({ configPath: join(dirs.etc, 'aenv', 'node.toml'), env: { ...secrets } });
    expect(node.warnings).toEqual([]);
    expect(node.config.home_path).toBe(dirs.home);
    for (const f of ['scheduler.json', 'gateway.json']) {
      const cfg = JSON.parse(readFileSync(join(dirs.etc, 'aenv', f), 'utf8'));
      expect(cfg.scheduler.report_ttl).toBe('30s');
      expect(cfg.gateway.request_timeout).toBe('30s');
    }
  });

  it('the units pass systemd-analyze verify with nothing to say', () => {
    const files = UNITS.map((u) => join(dirs.units, u));
    const r = verify(...files);
    expect({ status: r.status, out: r.stdout + r.stderr }).toEqual({ status: 0, out: '' });
    const server = readFileSync(files[0]!, 'utf8');
    expect(server).toMatch(/^User=root$/m);
    expect(server).toMatch(/^KillMode=mixed$/m);
    expect(server).toMatch(
      new RegExp(`^ExecStart=${dirs.prefix}/bin/aenv server --config ${dirs.etc}/aenv/node.toml$`, 'm'),
    );
    expect(server).toMatch(new RegExp(`^EnvironmentFile=-${dirs.etc}/default/aenv$`, 'm'));
    for (const f of files.slice(1)) expect(readFileSync(f, 'utf8')).toMatch(/^User=aenv$/m);
    expect(readFileSync(files[1]!, 'utf8')).not.toMatch(/secrets\.env/);
  });

  it('verify is a real check: a unit with a typo or a missing program fails it', () => {
    const bad = join(root, 'bad');
    mkdirSync(bad);
    const unit = readFileSync(join(dirs.units, 'aenv-gateway.service'), 'utf8');
    writeFileSync(join(bad, 'typo.service'), unit.replace('RestartSec=', 'RestartSek='));
    writeFileSync(
      join(bad, 'missing.service'),
      unit.replace(`${dirs.prefix}/bin/aenv`, `${dirs.prefix}/bin/nothing`),
    );
    expect(verify(join(bad, 'typo.service')).stderr).toMatch(/Unknown key 'RestartSek'/);
    const missing = verify(join(bad, 'missing.service'));
    expect(missing.status).not.toBe(0);
    expect(missing.stderr).toMatch(/is not executable/);
  });

  it('the scheduler and the gateway run unprivileged and hardened (systemd-analyze security: OK)', () => {
    for (const u of ['aenv-scheduler.service', 'aenv-gateway.service']) {
      const r = spawnSync(
        'systemd-analyze',
        ['security', '--offline=true', '--no-pager', join(dirs.units, u)],
        {
          encoding: 'utf8',
        },
      );
      const m = /Overall exposure level for \S+: ([\d.]+) (\S+)/.exec(r.stdout);
      expect(m, r.stdout + r.stderr).not.toBeNull();
      expect(Number(m![1]), u).toBeLessThanOrEqual(2);
    }
  });

  it('is idempotent: a second run keeps every file, the secrets and an edited config', () => {
    const etc = join(dirs.etc, 'aenv');
    const before = Object.fromEntries(listing(root).map((f) => [f, readFileSync(join(root, f), 'utf8')]));
    writeFileSync(join(etc, 'node.toml'), `${before['/etc/aenv/node.toml']}\n# edited\n`);
    writeFileSync(join(dirs.units, 'aenv-server.service'), 'tampered\n');
    const out = ok(install());
    expect(out).toMatch(new RegExp(`^keep {4}${etc}/node.toml \\(exists; not overwritten\\)$`, 'm'));
    expect(out).toMatch(new RegExp(`^update  ${dirs.units}/aenv-server.service$`, 'm'));
    expect(out).not.toMatch(/^create/m);
    const after = Object.fromEntries(listing(root).map((f) => [f, readFileSync(join(root, f), 'utf8')]));
    expect(Object.keys(after)).toEqual(Object.keys(before));
    expect(after['/etc/aenv/node.toml']).toMatch(/# edited/);
    for (const f of Object.keys(before).filter((f) => f !== '/etc/aenv/node.toml'))
      expect(after[f], f).toBe(before[f]);
    expect(
      ok(install())
        .split('\n')
        .filter((l) => /^(create|update)/.test(l)),
    ).toEqual([]);
  });

  it('refuses bad arguments with a clear message', () => {
    const bad = (args: string[], msg: RegExp) => {
      const r = spawnSync(INSTALL, args, { encoding: 'utf8' });
      expect(r.status).not.toBe(0);
      expect(r.stderr).toMatch(msg);
    };
    bad(['--dry-run', '--components', 'server,broker'], /unknown component broker/);
    bad(['--dry-run', '--prefix', 'relative/dir'], /--prefix must be an absolute path/);
    bad(['--dry-run', '--purge'], /--purge goes with --uninstall/);
    bad(
      ['--dry-run', '--source', join(root, 'etc')],
      /package\.json is missing: build the checkout first \(npm ci && npm run build\)/,
    );
  });

  it('--uninstall removes units, tree and wrapper but keeps configs and secrets; --purge removes those too', () => {
    ok(install('--uninstall'));
    for (const u of UNITS) expect(existsSync(join(dirs.units, u))).toBe(false);
    expect(existsSync(dirs.prefix + '/lib/aenv')).toBe(false);
    expect(existsSync(dirs.prefix + '/bin/aenv')).toBe(false);
    expect(listing(join(dirs.etc, 'aenv'))).toEqual([
      '/gateway.json',
      '/node.toml',
      '/scheduler.json',
      '/secrets.env',
    ]);
    const purge = ok(install('--uninstall', '--purge'));
    expect(purge).toMatch(/node state in .* is kept/);
    expect(existsSync(join(dirs.etc, 'aenv'))).toBe(false);
    expect(existsSync(join(dirs.etc, 'default', 'aenv'))).toBe(false);
    expect(existsSync(join(dirs.home, 'secrets'))).toBe(true);
    expect(
      ok(install('--uninstall', '--purge'))
        .split('\n')
        .filter((l) => l.startsWith('remove')),
    ).toEqual([]);
  });
});
