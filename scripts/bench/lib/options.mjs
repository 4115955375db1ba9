// Command-line options of `npm run bench` (scripts/bench/run.mjs). Every bad input is a clear error.
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';

/** End-to-end suites: each measures an operation through aenv and its raw twin in the same run. */
export const E2E_SUITES = ['create', 'exec', 'memory', 'pause', 'template', 'resume'];
/** What runs without --only (and the `e2e` group): `resume` holds 1 GB sandboxes, so it is asked for by name. */
export const DEFAULT_E2E_SUITES = E2E_SUITES.filter((s) => s !== 'resume');
/** The existing component benchmarks, run as child processes when asked for. */
export const COMPONENT_SUITES = ['runtime', 'network', 'image', 'envd'];

/** Where `--quick` writes its JSON when no `--json` is given. */
export const QUICK_JSON = join(tmpdir(), 'aenv-bench-quick.json');

/** The sample counts of `--quick` (see USAGE). */
export const QUICK_COUNTS = { createN: 5, execN: 15, crN: 2, templateN: 1, sandboxes: 10, settleSecs: 3 };

export const USAGE = `usage: npm run bench -- [options]

  --only LIST         comma-separated suites (default: ${DEFAULT_E2E_SUITES.join(',')})
                      end to end: ${E2E_SUITES.join(', ')} (resume: eager vs lazy resume from
                      disk of 256 MB / 1 GB sandboxes, only when named or with all)
                      components: ${COMPONENT_SUITES.join(', ')} (the per-module benchmarks)
                      groups: e2e (the default set), components, all
  --n N               samples per measured operation in every suite (overrides the defaults below)
  --create-n N        create -> usable samples (default 20)
  --exec-n N          exec round trip samples (default 50)
  --cr-n N            pause / resume / snapshot / fork rounds per sandbox kind (default 5; also the
                      resume suite's rounds)
  --template-n N      template builds and creates from the template (default 3)
  --sandboxes N       sandboxes running for the idle-memory measurement (default 50)
  --settle-secs S     idle time before memory is read (default 10)
  --json FILE         also write the results as JSON to FILE
  --quick             every suite and row (each with its raw twin), fewer samples: create 5, exec 15,
                      pause rounds 2, template 1, 10 sandboxes settled 3 s (under 3 minutes on the 2-core
                      VM); writes JSON (to ${QUICK_JSON} unless --json says where). Counts
                      given on their own (--n, --create-n, ...) still win
  --trace             also print where the time goes: the median of each phase the node reports for
                      every lifecycle route (its Server-Timing header; docs/benchmarks.md#phases)
  --keep              clean nothing up at the end (servers are killed, sandboxes and raw containers stay;
                      remove them later with --cleanup)
  --cleanup           remove what an earlier (crashed or --keep) run left behind, then exit
  --force             run even when the load average is above --max-load
  --max-load X        refuse to run above this 1-minute load average (default ${defaultMaxLoad()})
  --criu PATH         CRIU for the raw checkpoint/restore twins (default: $AENV_CRIU_PATH or
                      /var/lib/aenv/deps/criu/current/bin/criu, the one aenv uses)
  --help`;

function defaultMaxLoad() {
  return Math.max(0.5, cpus().length * 0.5);
}

function positiveInt(name, text) {
  if (text === undefined || !/^\d+$/.test(text) || Number(text) < 1) {
    throw new Error(
      `${name} needs a positive whole number, got ${text === undefined ? 'nothing' : `"${text}"`}`,
    );
  }
  return Number(text);
}

function nonNegativeNumber(name, text) {
  const x = Number(text);
  if (text === undefined || text === '' || !Number.isFinite(x) || x < 0) {
    throw new Error(`${name} needs a number >= 0, got ${text === undefined ? 'nothing' : `"${text}"`}`);
  }
  return x;
}

function parseSuites(text) {
  if (!text) throw new Error('--only needs a comma-separated list of suites');
  const out = new Set();
  for (const raw of text.split(',')) {
    const s = raw.trim();
    if (!s) continue;
    if (s === 'all') [...E2E_SUITES, ...COMPONENT_SUITES].forEach((x) => out.add(x));
    else if (s === 'e2e') DEFAULT_E2E_SUITES.forEach((x) => out.add(x));
    else if (s === 'components') COMPONENT_SUITES.forEach((x) => out.add(x));
    else if (E2E_SUITES.includes(s) || COMPONENT_SUITES.includes(s)) out.add(s);
    else {
      throw new Error(
        `unknown suite "${s}"; known: ${[...E2E_SUITES, ...COMPONENT_SUITES].join(', ')}, e2e, components, all`,
      );
    }
  }
  if (out.size === 0) throw new Error('--only names no suite');
  return out;
}

/**
 * @typedef {{
 *   suites: Set<string>, createN: number, execN: number, crN: number, templateN: number,
 *   sandboxes: number, settleSecs: number, json: string | null, keep: boolean, trace: boolean, cleanup: boolean,
 *   force: boolean, maxLoad: number, criuPath: string, help: boolean, n: number | null, quick: boolean
 * }} BenchOptions
 */

/** @returns {BenchOptions} */
export function parseOptions(argv, env = process.env) {
  /** @type {BenchOptions} */
  const o = {
    suites: new Set(DEFAULT_E2E_SUITES),
    n: null,
    createN: 20,
    execN: 50,
    crN: 5,
    templateN: 3,
    sandboxes: 50,
    settleSecs: 10,
    json: null,
    keep: false,
    trace: false,
    cleanup: false,
    force: false,
    maxLoad: defaultMaxLoad(),
    criuPath: env.AENV_CRIU_PATH || '/var/lib/aenv/deps/criu/current/bin/criu',
    help: false,
    quick: false,
  };
  const explicit = new Set();
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    // --name=value and --name value are both accepted.
    const eq = arg.indexOf('=');
    const name = arg.startsWith('--') && eq > 0 ? arg.slice(0, eq) : arg;
    // The next word is a value only when it is not itself an option (`--json --keep` lacks a file name).
    const value = () => {
      if (arg.startsWith('--') && eq > 0) return arg.slice(eq + 1);
      if (argv[i + 1] === undefined || argv[i + 1].startsWith('--')) return undefined;
      return argv[++i];
    };
    switch (name) {
      case '--only':
        o.suites = parseSuites(value());
        break;
      case '--n':
        o.n = positiveInt(name, value());
        break;
      case '--create-n':
      case '--exec-n':
      case '--cr-n':
      case '--template-n':
      case '--sandboxes': {
        const key = {
          '--create-n': 'createN',
          '--exec-n': 'execN',
          '--cr-n': 'crN',
          '--template-n': 'templateN',
          '--sandboxes': 'sandboxes',
        }[name];
        o[key] = positiveInt(name, value());
        explicit.add(key);
        break;
      }
      case '--settle-secs':
        o.settleSecs = nonNegativeNumber(name, value());
        explicit.add('settleSecs');
        break;
      case '--quick':
        o.quick = true;
        break;
      case '--json': {
        const v = value();
        if (!v) throw new Error('--json needs a file name');
        o.json = v;
        break;
      }
      case '--max-load':
        o.maxLoad = nonNegativeNumber(name, value());
        break;
      case '--criu': {
        const v = value();
        if (!v) throw new Error('--criu needs a path');
        o.criuPath = v;
        break;
      }
      case '--trace':
        o.trace = true;
        break;
      case '--keep':
        o.keep = true;
        break;
      case '--cleanup':
        o.cleanup = true;
        break;
      case '--force':
        o.force = true;
        break;
      case '--help':
      case '-h':
        o.help = true;
        break;
      default:
        throw new Error(`unknown option "${arg}"`);
    }
  }
  if (o.quick) {
    for (const [key, n] of Object.entries(QUICK_COUNTS)) if (!explicit.has(key)) o[key] = n;
    o.json ??= QUICK_JSON;
  }
  if (o.n !== null) {
    // --n sets every sample count that was not given on its own.
    for (const key of ['createN', 'execN', 'crN', 'templateN']) if (!explicit.has(key)) o[key] = o.n;
  }
  if (o.keep && o.cleanup) throw new Error('--keep and --cleanup contradict each other');
  return o;
}
