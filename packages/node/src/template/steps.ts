// The body of `POST /v2/templates/{id}/builds/{id}` (TemplateBuildStartV2) and its steps, validated before the
// build is accepted: every error here is a 400 the SDK shows to the user.
import { DomainError, ErrorKind, templateBuildStartV2Schema, type TemplateStep } from '@aenv/protocol';

interface StepBase {
  /** 1-based position in the request; the SDK maps `reason.step` back to the user's source line with it. */
  index: number;
  /** e.g. `RUN apt-get update`, for logs and error messages. */
  label: string;
  /** Step-level `force`: this step and every later one skip the layer cache. */
  force: boolean;
  /** What the cache key of this step is computed from. */
  keyText: string;
}

export type BuildStep = StepBase &
  (
    | { kind: 'run'; cmd: string; user?: string }
    | { kind: 'env'; vars: [string, string][] }
    | { kind: 'workdir'; path: string }
    | { kind: 'user'; user: string }
    | { kind: 'copy'; src: string; dest: string; user?: string; mode?: number; filesHash: string }
    | { kind: 'expose'; port: string }
    | { kind: 'volume'; path: string }
    | { kind: 'label'; pairs: [string, string][] }
  );

export type BuildBase =
  | { kind: 'image'; ref: string; credentials?: { username: string; password: string } }
  | { kind: 'template'; ref: string };

export interface BuildSpec {
  base: BuildBase;
  steps: BuildStep[];
  /** Build-level `force` (the SDK's skipCache() before fromImage, or `skipCache` build option). */
  force: boolean;
  startCmd?: string;
  readyCmd?: string;
}

const FILES_HASH_RE = /^[0-9a-f]{64}$/;
const ENV_NAME_RE = /^[A-Za-z_][A-Za-z0-9_]*$/;
const MODE_RE = /^0?[0-7]{3,4}$/;

function bad(message: string): DomainError {
  return new DomainError(ErrorKind.InvalidArgument, message);
}

function shortLabel(type: string, args: readonly string[]): string {
  const text = `${type} ${args.filter((a) => a !== '').join(' ')}`.trim();
  return text.length > 200 ? `${text.slice(0, 197)}...` : text;
}

function pairs(type: string, index: number, args: readonly string[], what: string): [string, string][] {
  if (args.length === 0 || args.length % 2 !== 0) {
    throw bad(`step ${index} (${type}) needs ${what} as key/value pairs (an even, non-zero number of args)`);
  }
  const out: [string, string][] = [];
  for (let i = 0; i < args.length; i += 2) out.push([args[i]!, args[i + 1]!]);
  return out;
}

function first(type: string, index: number, args: readonly string[], what: string): string {
  const v = args[0];
  if (v === undefined || v.trim() === '')
    throw bad(`step ${index} (${type}) needs ${what} as its first argument`);
  return v;
}

function parseStep(raw: TemplateStep, index: number, uploaded: (hash: string) => boolean): BuildStep {
  const type = raw.type.trim().toUpperCase();
  const args = raw.args ?? [];
  const base = {
    index,
    label: shortLabel(
      type,
      type === 'RUN' ? args.slice(0, 1) : type === 'COPY' || type === 'ADD' ? args.slice(0, 2) : args,
    ),
    force: raw.force === true,
    keyText: JSON.stringify([type, args, raw.filesHash ?? null]),
  };
  switch (type) {
    case 'RUN': {
      const cmd = first(type, index, args, 'a command');
      const user = args[1]?.trim();
      return { ...base, kind: 'run', cmd, ...(user ? { user } : {}) };
    }
    case 'ENV':
    case 'ARG': {
      const vars = pairs(type, index, args, 'variables');
      for (const [k] of vars) {
        if (!ENV_NAME_RE.test(k))
          throw bad(`step ${index} (${type}): invalid variable name ${JSON.stringify(k)}`);
      }
      return { ...base, kind: 'env', vars };
    }
    case 'WORKDIR':
      return { ...base, kind: 'workdir', path: first(type, index, args, 'a path') };
    case 'USER': {
      const user = first(type, index, args, 'a user name').trim();
      if (!/^[A-Za-z0-9_.][A-Za-z0-9_.-]*(:[A-Za-z0-9_.-]+)?$/.test(user)) {
        throw bad(`step ${index} (USER): invalid user ${JSON.stringify(user)}`);
      }
      return { ...base, kind: 'user', user: user.split(':', 1)[0]! };
    }
    case 'COPY':
    case 'ADD': {
      if (args.length < 2 || !args[0] || !args[1]) {
        throw bad(`step ${index} (${type}) needs a source and a destination`);
      }
      const src = args[0];
      if (src.startsWith('/') || src.split('/').includes('..')) {
        throw bad(
          `step ${index} (${type}): source ${JSON.stringify(src)} must be relative to the build context`,
        );
      }
      const filesHash = (raw.filesHash ?? '').trim();
      if (!FILES_HASH_RE.test(filesHash)) {
        throw bad(
          `step ${index} (${type}) needs filesHash (64 lowercase hex characters) naming its uploaded files`,
        );
      }
      if (!uploaded(filesHash)) {
        throw bad(
          `step ${index} (${type} ${src}): the files with hash ${filesHash} were not uploaded (GET /templates/{id}/files/${filesHash} gives the upload link)`,
        );
      }
      const user = args[2]?.trim();
      const modeText = args[3]?.trim();
      let mode: number | undefined;
      if (modeText) {
        if (!MODE_RE.test(modeText))
          throw bad(`step ${index} (${type}): mode ${JSON.stringify(modeText)} is not octal`);
        mode = parseInt(modeText, 8);
      }
      return {
        ...base,
        kind: 'copy',
        src,
        dest: args[1],
        filesHash,
        ...(user ? { user } : {}),
        ...(mode !== undefined ? { mode } : {}),
      };
    }
    case 'EXPOSE':
      return { ...base, kind: 'expose', port: first(type, index, args, 'a port') };
    case 'VOLUME':
      return { ...base, kind: 'volume', path: first(type, index, args, 'a path') };
    case 'LABEL':
      return { ...base, kind: 'label', pairs: pairs(type, index, args, 'labels') };
    default:
      throw bad(`template step type ${raw.type} is not supported`);
  }
}

/** Validates the build request. `uploaded` tells whether a COPY step's files are on this node. */
export function parseBuildSpec(
  body: unknown,
  opts: { defaultImage: string; uploaded: (hash: string) => boolean },
): BuildSpec {
  const parsed = templateBuildStartV2Schema.safeParse(body ?? {});
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw bad(`invalid build request: ${issue.path.join('.') || 'body'}: ${issue.message}`);
  }
  const req = parsed.data;
  const fromImage = req.fromImage?.trim() ?? '';
  const fromTemplate = req.fromTemplate?.trim() ?? '';
  if (fromImage && fromTemplate) throw bad('cannot specify both fromImage and fromTemplate');

  let base: BuildBase;
  if (fromTemplate) {
    if (req.fromImageRegistry) throw bad('fromImageRegistry applies to fromImage only');
    base = { kind: 'template', ref: fromTemplate };
  } else {
    const ref = fromImage || opts.defaultImage;
    if (!ref) throw bad('no fromImage given and no [image.resolver].default_image configured');
    base = { kind: 'image', ref };
    const reg = req.fromImageRegistry;
    if (reg) {
      if (reg.type !== 'registry') {
        throw bad(`fromImageRegistry type ${JSON.stringify(reg.type)} is not supported (only "registry")`);
      }
      const { username, password } = reg as { username?: unknown; password?: unknown };
      if (typeof username !== 'string' || typeof password !== 'string' || !username) {
        throw bad('fromImageRegistry of type registry needs username and password');
      }
      base.credentials = { username, password };
    }
  }

  const steps = (req.steps ?? []).map((s, i) => parseStep(s, i + 1, opts.uploaded));
  const startCmd = req.startCmd?.trim() ? req.startCmd : undefined;
  const readyCmd = req.readyCmd?.trim() ? req.readyCmd : undefined;
  return {
    base,
    steps,
    force: req.force === true,
    ...(startCmd ? { startCmd } : {}),
    ...(readyCmd ? { readyCmd } : {}),
  };
}

/** Whether the step can change the disk (and so gets a layer-cache entry after it). */
export function changesDisk(step: BuildStep): boolean {
  return step.kind === 'run' || step.kind === 'copy' || step.kind === 'workdir' || step.kind === 'user';
}

/** Index (0-based) of the first step the cache must not serve, `steps.length` when none is forced. */
export function firstForcedStep(spec: BuildSpec): number {
  if (spec.force) return 0;
  const i = spec.steps.findIndex((s) => s.force);
  return i === -1 ? spec.steps.length : i;
}
