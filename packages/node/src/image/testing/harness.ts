// Test harness: an ImageService on a private root dir and state DB, with a log that tests can inspect.
// Not used by the server itself.

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Registry } from 'prom-client';
import { openStateDb, type StateDb } from '../../state/db.js';
import { ImageService, type ImageLogger, type ImageServiceOptions } from '../image-service.js';
import { imageMigrations } from '../migrations.js';

export interface LogLine {
  level: string;
  obj: object;
  msg: string | undefined;
}

export function memoryLogger(
  lines: LogLine[] = [],
  bindings: Record<string, unknown> = {},
): ImageLogger & { lines: LogLine[] } {
  const at =
    (level: string) =>
    (obj: object, msg?: string): void => {
      lines.push({ level, obj: { ...bindings, ...obj }, msg });
    };
  return {
    lines,
    info: at('info'),
    warn: at('warn'),
    error: at('error'),
    debug: at('debug'),
    child: (b) => memoryLogger(lines, { ...bindings, ...b }),
  };
}

export interface Harness {
  dir: string;
  rootDir: string;
  dbPath: string;
  db: StateDb;
  log: ReturnType<typeof memoryLogger>;
  metrics: Registry;
  service: ImageService;
  /** A second service on the same root dir and DB file (a "restart"); the old one is stopped first. */
  restart(extra?: Partial<ImageServiceOptions>): Promise<ImageService>;
  close(): Promise<void>;
}

export const FAST_RETRY = { retries: 2, baseDelayMs: 10, maxDelayMs: 50 };

export async function startHarness(extra: Partial<ImageServiceOptions> = {}): Promise<Harness> {
  const dir = mkdtempSync(join(tmpdir(), 'aenv-image-'));
  const rootDir = join(dir, 'image-cache');
  const dbPath = join(dir, 'state.db');
  const log = memoryLogger();
  let db = openStateDb(dbPath, imageMigrations);
  let metrics = new Registry();
  const make = (x: Partial<ImageServiceOptions>): ImageService =>
    new ImageService({
      rootDir,
      db,
      logger: log,
      metricsRegistry: metrics,
      dockerConfigDir: null,
      retry: FAST_RETRY,
      syncLayers: false,
      ...extra,
      ...x,
      // Tests write their layouts under the system temp dir; the base-image cache stays allowed as by default.
      resolver: {
        localImageDirs: [tmpdir(), '/var/cache/aenv/images'],
        ...extra.resolver,
        ...x.resolver,
      },
    });
  const h: Harness = {
    dir,
    rootDir,
    dbPath,
    db,
    log,
    metrics,
    service: make({}),
    async restart(x = {}) {
      await h.service.stop();
      db.close();
      db = openStateDb(dbPath, imageMigrations);
      metrics = new Registry();
      h.db = db;
      h.metrics = metrics;
      h.service = make(x);
      await h.service.init();
      return h.service;
    },
    async close() {
      await h.service.stop();
      db.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
  await h.service.init();
  return h;
}

/** Current value of a counter/gauge (summed over label sets matching `labels`). */
export async function metricValue(
  reg: Registry,
  name: string,
  labels: Record<string, string> = {},
): Promise<number> {
  const m = reg.getSingleMetric(name);
  if (!m) return 0;
  const data = await m.get();
  return data.values
    .filter((v) =>
      Object.entries(labels).every(([k, val]) => (v.labels as Record<string, unknown>)[k] === val),
    )
    .filter((v) => !('metricName' in v) || v.metricName === name || v.metricName === undefined)
    .reduce((s, v) => s + v.value, 0);
}
