// The Kubernetes deployment (deploy/k8s): rendered the way Kustomize renders it, every object validated
// against the Kubernetes v1.33 OpenAPI schemas (kubernetes-models, compiled with ajv) and checked for
// unknown fields (the same package's TypeScript types, by the compiler's excess-property check), then the
// cross-references Kubernetes does not check: Services select pods that name their ports, probes name
// existing ports, pods mount objects that exist, the scheduler's config finds the headless node Service,
// and the node config loads. Offline: `kubectl kustomize` when kubectl is installed, else our own
// rendering of what kustomization.yaml lists (both are checked when both are available).
import { spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync, mkdirSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { parseAllDocuments } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '@aenv/config';

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', '..');
const K8S = join(REPO, 'deploy', 'k8s');
const NAMESPACE = 'agentenv';

interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  [key: string]: unknown;
}

// ---- rendering -----------------------------------------------------------------------------------------

/** Kubernetes reads YAML 1.1 (0440 is octal); so do we. */
function parseYaml(text: string, where: string): unknown[] {
  return parseAllDocuments(text, { version: '1.1' })
    .map((doc) => {
      if (doc.errors.length) throw new Error(`${where}: ${doc.errors.map((e) => e.message).join('; ')}`);
      return doc.toJS({ maxAliasCount: 0 }) as unknown;
    })
    .filter((d) => d !== null && d !== undefined);
}

function asObjects(docs: unknown[], where: string): K8sObject[] {
  return docs.map((d, i) => {
    const o = d as K8sObject;
    if (
      typeof o?.apiVersion !== 'string' ||
      typeof o.kind !== 'string' ||
      typeof o.metadata?.name !== 'string'
    )
      throw new Error(`${where} document ${i + 1} has no apiVersion, kind and metadata.name`);
    return o;
  });
}

const kubectl = spawnSync('kubectl', ['version', '--client'], { encoding: 'utf8' }).status === 0;

function kustomizeBuild(dir: string): K8sObject[] {
  const r = spawnSync('kubectl', ['kustomize', dir], { encoding: 'utf8', maxBuffer: 32 * 1024 * 1024 });
  if (r.status !== 0) throw new Error(`kubectl kustomize ${dir} failed: ${r.stderr}`);
  const objects = asObjects(parseYaml(r.stdout, `kubectl kustomize ${dir}`), dir);
  // Kustomize wraps Secret data at 70 columns; the API server's base64 decoder skips line breaks.
  for (const o of objects)
    if (o.kind === 'Secret' && o.data)
      for (const [k, v] of Object.entries(o.data as Record<string, string>))
        (o.data as Record<string, string>)[k] = v.replace(/\n/g, '');
  return objects;
}

interface Generator {
  name: string;
  files: string[];
}

const CLUSTER_SCOPED = new Set(['Namespace']);

/**
 * What kustomization.yaml lists, without Kustomize: its resources, its generators (names without
 * the content hash) and its namespace and labels. Enough for the base, which uses nothing else.
 */
function renderWithoutKustomize(dir: string): K8sObject[] {
  const k = parseYaml(readFileSync(join(dir, 'kustomization.yaml'), 'utf8'), 'kustomization.yaml')[0] as {
    namespace: string;
    resources: string[];
    labels?: { pairs: Record<string, string> }[];
    configMapGenerator?: Generator[];
    secretGenerator?: Generator[];
  };
  const objects: K8sObject[] = [];
  for (const file of k.resources)
    objects.push(...asObjects(parseYaml(readFileSync(join(dir, file), 'utf8'), file), file));
  const fromFiles = (g: Generator) =>
    Object.fromEntries(
      g.files.map((spec) => {
        const [key, path] = spec.includes('=') ? spec.split('=', 2) : [spec.split('/').pop()!, spec];
        return [key!, readFileSync(join(dir, path!), 'utf8')];
      }),
    );
  for (const g of k.configMapGenerator ?? [])
    objects.push({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: g.name }, data: fromFiles(g) });
  for (const g of k.secretGenerator ?? [])
    objects.push({
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: g.name },
      type: 'Opaque',
      data: Object.fromEntries(
        Object.entries(fromFiles(g)).map(([key, v]) => [key, Buffer.from(v).toString('base64')]),
      ),
    });
  const labels = Object.assign({}, ...(k.labels ?? []).map((l) => l.pairs)) as Record<string, string>;
  for (const o of objects) {
    if (!CLUSTER_SCOPED.has(o.kind)) o.metadata.namespace = k.namespace;
    o.metadata.labels = { ...o.metadata.labels, ...labels };
  }
  return objects;
}

/** A generated name without Kustomize's content hash suffix. */
const baseName = (name: string) => name.replace(/-[a-z0-9]{10}$/, '');

// ---- schema validation -----------------------------------------------------------------------------------

const MODEL_MODULE: Record<string, string> = {
  v1: 'kubernetes-models/v1',
  'apps/v1': 'kubernetes-models/apps/v1',
  'rbac.authorization.k8s.io/v1': 'kubernetes-models/rbac.authorization.k8s.io/v1',
  'networking.k8s.io/v1': 'kubernetes-models/networking.k8s.io/v1',
};

/** kubernetes-models' ajv validators: types, formats, enums, required fields. Returns the problems. */
async function schemaProblems(objects: K8sObject[]): Promise<string[]> {
  const problems: string[] = [];
  for (const o of objects) {
    const mod = MODEL_MODULE[o.apiVersion];
    if (!mod) {
      problems.push(`${o.kind}/${o.metadata.name}: apiVersion ${o.apiVersion} is not checked by this test`);
      continue;
    }
    const models = (await import(`${mod}/${o.kind}`)) as Record<
      string,
      new (data: unknown) => { validate(): void }
    >;
    const Model = models[o.kind];
    if (!Model) {
      problems.push(`${o.kind}/${o.metadata.name}: ${o.apiVersion} has no kind ${o.kind}`);
      continue;
    }
    try {
      new Model(structuredClone(o)).validate();
    } catch (e) {
      problems.push(`${o.kind}/${o.metadata.name}: ${(e as Error).message}`);
    }
  }
  return problems;
}

/**
 * Unknown fields (a misspelt `livenessprobe` is valid JSON Schema, and Kubernetes drops it silently):
 * each object is type-checked as an object literal of its kubernetes-models interface.
 */
function unknownFieldProblems(objects: K8sObject[]): string[] {
  const lines: string[] = [];
  const owner: number[] = [];
  objects.forEach((o, i) => {
    const mod = MODEL_MODULE[o.apiVersion];
    const text = `export const o${i}: import('${mod}/${o.kind}').I${o.kind} = ${JSON.stringify(o, null, 1)};`;
    for (const line of text.split('\n')) {
      lines.push(line);
      owner.push(i);
    }
  });
  // A file that does not exist, beside this one, so the package resolves from the repo's node_modules.
  const file = join(dirname(fileURLToPath(import.meta.url)), '__k8s_objects__.ts');
  const source = lines.join('\n');
  const options: ts.CompilerOptions = {
    strict: true,
    noEmit: true,
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    types: [],
    skipLibCheck: true,
  };
  const host = ts.createCompilerHost(options);
  const getSourceFile = host.getSourceFile.bind(host);
  host.getSourceFile = (name, lang, ...rest) =>
    name === file ? ts.createSourceFile(name, source, lang) : getSourceFile(name, lang, ...rest);
  const fileExists = host.fileExists.bind(host);
  host.fileExists = (name) => name === file || fileExists(name);
  const program = ts.createProgram([file], options, host);
  return ts
    .getPreEmitDiagnostics(program)
    .filter((d) => d.file?.fileName === file || d.file === undefined)
    .map((d) => {
      const msg = ts.flattenDiagnosticMessageText(d.messageText, ' ');
      if (!d.file || d.start === undefined) return msg;
      const { line } = d.file.getLineAndCharacterOfPosition(d.start);
      const o = objects[owner[line]!]!;
      return `${o.kind}/${o.metadata.name} (${lines[line]!.trim()}): ${msg}`;
    });
}

// ---- the objects under test --------------------------------------------------------------------------------

let work: string;
let base: K8sObject[];
let baseOwn: K8sObject[];
let withS3: K8sObject[] | undefined;

beforeAll(() => {
  work = mkdtempSync(join(tmpdir(), 'aenv-k8s-'));
  cpSync(K8S, join(work, 'k8s'), {
    recursive: true,
    filter: (src) => !src.includes(`${join('base', 'secrets')}/`),
  });
  const gen = spawnSync(join(work, 'k8s', 'generate-secrets.sh'), [], { encoding: 'utf8' });
  expect(gen.status, gen.stderr).toBe(0);
  writeFileSync(
    join(work, 'k8s', 'components', 's3-repository', 'secrets', 'credentials.json'),
    '{"Version": 1, "AccessKeyId": "test", "SecretAccessKey": "test"}\n',
  );
  mkdirSync(join(work, 'k8s', 'overlay-s3'));
  writeFileSync(
    join(work, 'k8s', 'overlay-s3', 'kustomization.yaml'),
    'resources: [../base]\ncomponents: [../components/s3-repository]\n',
  );
  baseOwn = renderWithoutKustomize(join(work, 'k8s', 'base'));
  base = kubectl ? kustomizeBuild(join(work, 'k8s', 'base')) : baseOwn;
  withS3 = kubectl ? kustomizeBuild(join(work, 'k8s', 'overlay-s3')) : undefined;
});

afterAll(() => rmSync(work, { recursive: true, force: true }));

const find = (objects: K8sObject[], kind: string, name: string) => {
  const o = objects.find((x) => x.kind === kind && baseName(x.metadata.name) === name);
  if (!o)
    throw new Error(
      `no ${kind}/${name} among ${objects.map((x) => `${x.kind}/${x.metadata.name}`).join(', ')}`,
    );
  return o;
};

interface PodSpec {
  serviceAccountName?: string;
  hostNetwork?: boolean;
  terminationGracePeriodSeconds?: number;
  containers: {
    name: string;
    args?: string[];
    ports?: { name?: string; containerPort: number }[];
    env?: { name: string; valueFrom?: { secretKeyRef?: { name: string; key: string } } }[];
    volumeMounts?: { name: string; mountPath: string; readOnly?: boolean }[];
    securityContext?: { privileged?: boolean };
    resources?: { requests?: Record<string, string>; limits?: Record<string, string> };
    [probe: string]: unknown;
  }[];
  volumes?: {
    name: string;
    configMap?: { name: string };
    secret?: { secretName: string };
    persistentVolumeClaim?: { claimName: string };
    hostPath?: { path: string };
  }[];
}

const workloads = (objects: K8sObject[]) =>
  objects.filter((o) => o.kind === 'Deployment' || o.kind === 'DaemonSet') as (K8sObject & {
    spec: {
      replicas?: number;
      selector: { matchLabels: Record<string, string> };
      template: { metadata: { labels: Record<string, string> }; spec: PodSpec };
      strategy?: { type: string };
    };
  })[];

describe('deploy/k8s renders', () => {
  it('with our own rendering to the same objects as kubectl kustomize', () => {
    const names = (objects: K8sObject[]) =>
      objects.map((o) => `${o.kind}/${baseName(o.metadata.name)}`).sort();
    expect(names(baseOwn)).toContain('DaemonSet/agentenv-node');
    if (kubectl) expect(names(base)).toEqual(names(baseOwn));
  });

  it('with the s3-repository component: no shared volume, the credentials mounted, an oss node config', () => {
    if (!withS3)
      return expect(kubectl, 'kubectl is not installed: the component cannot be rendered').toBe(false);
    expect(withS3.find((o) => o.kind === 'PersistentVolumeClaim')).toBeUndefined();
    const ds = workloads(withS3).find((w) => w.kind === 'DaemonSet')!;
    const mounts = ds.spec.template.spec.containers[0]!.volumeMounts!.map((m) => m.mountPath);
    expect(mounts).toContain('/etc/aenv/s3');
    expect(mounts).not.toContain('/var/lib/aenv-shared');
    const toml = (find(withS3, 'ConfigMap', 'agentenv-node-config').data as Record<string, string>)[
      'node.toml'
    ]!;
    expect(toml).toMatch(/repository_backend = "oss"/);
  });
});

describe('deploy/k8s objects against the Kubernetes v1.33 schemas', () => {
  it('pass the OpenAPI schema validation (base and s3 component)', async () => {
    expect(await schemaProblems(base)).toEqual([]);
    if (withS3) expect(await schemaProblems(withS3)).toEqual([]);
  });

  it('have no unknown fields (base and s3 component)', () => {
    expect(unknownFieldProblems(base)).toEqual([]);
    if (withS3) expect(unknownFieldProblems(withS3)).toEqual([]);
  });

  it('the checks catch a wrong type, a wrong enum, a missing field and a misspelt field', async () => {
    const ds = structuredClone(find(base, 'DaemonSet', 'agentenv-node')) as K8sObject & {
      spec: { template: { spec: PodSpec } };
    };
    const misspelt = structuredClone(ds);
    const c = ds.spec.template.spec.containers[0]! as unknown as Record<string, unknown>;
    (c.ports as { containerPort: unknown }[])[0]!.containerPort = '8000';
    c.imagePullPolicy = 'Sometimes';
    const m = misspelt.spec.template.spec.containers[0]! as unknown as Record<string, unknown>;
    m.livenessprobe = m.livenessProbe;
    const svc = structuredClone(find(base, 'Service', 'agentenv-nodes')) as K8sObject & {
      spec: { ports: Record<string, unknown>[] };
    };
    delete svc.spec.ports[0]!.port;
    const problems = (await schemaProblems([ds, svc])).join('\n');
    expect(problems).toMatch(/containerPort must be integer/);
    expect(problems).toMatch(/imagePullPolicy must be equal to one of the allowed values/);
    expect(problems).toMatch(/ports\/0 must have required property '?port'?/);
    expect(unknownFieldProblems([misspelt]).join('\n')).toMatch(
      /'"livenessprobe"' does not exist in type 'IContainer'/,
    );
    // JSON Schema alone lets the misspelling through: that is why the type check is there.
    expect(await schemaProblems([misspelt])).toEqual([]);
    expect(unknownFieldProblems([ds]).join('\n')).toMatch(/'string' is not assignable to type 'number'/);
  });
});

describe('deploy/k8s wiring', () => {
  it('every ConfigMap, Secret, PVC and ServiceAccount a pod uses exists', () => {
    const exists = (kind: string, name: string) =>
      base.some((o) => o.kind === kind && o.metadata.name === name);
    const missing: string[] = [];
    for (const w of workloads(base)) {
      const pod = w.spec.template.spec;
      if (pod.serviceAccountName && !exists('ServiceAccount', pod.serviceAccountName))
        missing.push(`${w.metadata.name}: ServiceAccount ${pod.serviceAccountName}`);
      for (const v of pod.volumes ?? []) {
        if (v.configMap && !exists('ConfigMap', v.configMap.name))
          missing.push(`${w.metadata.name}: ConfigMap ${v.configMap.name}`);
        if (v.secret && !exists('Secret', v.secret.secretName))
          missing.push(`${w.metadata.name}: Secret ${v.secret.secretName}`);
        if (v.persistentVolumeClaim && !exists('PersistentVolumeClaim', v.persistentVolumeClaim.claimName))
          missing.push(`${w.metadata.name}: PVC ${v.persistentVolumeClaim.claimName}`);
      }
      for (const c of pod.containers) {
        for (const m of c.volumeMounts ?? [])
          if (!pod.volumes?.some((v) => v.name === m.name))
            missing.push(`${w.metadata.name}: volume ${m.name}`);
        for (const e of c.env ?? []) {
          const ref = e.valueFrom?.secretKeyRef;
          if (!ref) continue;
          const secret = base.find((o) => o.kind === 'Secret' && o.metadata.name === ref.name);
          if (!secret || !(ref.key in (secret.data as Record<string, string>)))
            missing.push(`${w.metadata.name}: Secret key ${ref.name}/${ref.key}`);
        }
      }
    }
    expect(missing).toEqual([]);
  });

  it('every Service selects a workload whose pods name the target port; probes name existing ports', () => {
    const problems: string[] = [];
    for (const svc of base.filter((o) => o.kind === 'Service') as (K8sObject & {
      spec: { selector: Record<string, string>; ports: { name: string; port: number; targetPort: string }[] };
    })[]) {
      const backing = workloads(base).filter((w) =>
        Object.entries(svc.spec.selector).every(([k, v]) => w.spec.template.metadata.labels[k] === v),
      );
      if (backing.length !== 1)
        problems.push(`Service ${svc.metadata.name} selects ${backing.length} workloads`);
      for (const w of backing)
        for (const p of svc.spec.ports)
          if (!w.spec.template.spec.containers.some((c) => c.ports?.some((cp) => cp.name === p.targetPort)))
            problems.push(`Service ${svc.metadata.name} port ${p.name}: no container port ${p.targetPort}`);
    }
    for (const w of workloads(base)) {
      expect(w.spec.selector.matchLabels).toEqual(
        Object.fromEntries(
          Object.keys(w.spec.selector.matchLabels).map((k) => [k, w.spec.template.metadata.labels[k]]),
        ),
      );
      for (const c of w.spec.template.spec.containers)
        for (const kind of ['startupProbe', 'readinessProbe', 'livenessProbe']) {
          const probe = c[kind] as { httpGet?: { port: string }; tcpSocket?: { port: string } } | undefined;
          const port = probe?.httpGet?.port ?? probe?.tcpSocket?.port;
          if (port !== undefined && !c.ports?.some((p) => p.name === port))
            problems.push(`${w.metadata.name} ${kind}: no port ${port}`);
        }
    }
    expect(problems).toEqual([]);
  });

  it('gateway: 2 replicas behind /health; scheduler: 1 replica, Recreate; both read their config file', () => {
    const [gw, sch] = ['agentenv-gateway', 'agentenv-scheduler'].map((n) =>
      workloads(base).find((w) => w.metadata.name === n)!,
    );
    expect(gw!.spec.replicas).toBe(2);
    expect(gw!.spec.template.spec.containers[0]!.args).toEqual([
      'gateway',
      '-config',
      '/etc/aenv/gateway.json',
    ]);
    expect(sch!.spec.replicas).toBe(1);
    expect(sch!.spec.strategy?.type).toBe('Recreate');
    expect(sch!.spec.template.spec.containers[0]!.args).toEqual([
      'scheduler',
      '-config',
      '/etc/aenv/scheduler.json',
    ]);
    expect(sch!.spec.template.spec.serviceAccountName).toBe('agentenv-scheduler');
  });

  it('the scheduler may list and watch EndpointSlices (and pods) in its namespace, nothing more', () => {
    const role = find(base, 'Role', 'agentenv-scheduler-discovery') as K8sObject & {
      rules: { apiGroups: string[]; resources: string[]; verbs: string[] }[];
    };
    expect(role.metadata.namespace).toBe(NAMESPACE);
    expect(role.rules).toEqual([
      { apiGroups: ['discovery.k8s.io'], resources: ['endpointslices'], verbs: ['get', 'list', 'watch'] },
      { apiGroups: [''], resources: ['pods'], verbs: ['get', 'list', 'watch'] },
    ]);
    const binding = find(base, 'RoleBinding', 'agentenv-scheduler-discovery') as K8sObject & {
      roleRef: { kind: string; name: string };
      subjects: { kind: string; name: string; namespace?: string }[];
    };
    expect(binding.roleRef).toMatchObject({ kind: 'Role', name: 'agentenv-scheduler-discovery' });
    expect(binding.subjects).toEqual([
      expect.objectContaining({ kind: 'ServiceAccount', name: 'agentenv-scheduler' }),
    ]);
    if (kubectl) expect(binding.subjects[0]!.namespace).toBe(NAMESPACE);
  });

  it('the node DaemonSet: privileged, pod network, the host paths a node needs, graceful stop, node id = pod name', () => {
    const ds = workloads(base).find((w) => w.kind === 'DaemonSet')!;
    const pod = ds.spec.template.spec;
    const c = pod.containers[0]!;
    expect(c.securityContext?.privileged).toBe(true);
    expect(pod.hostNetwork).toBe(false);
    expect(pod.terminationGracePeriodSeconds).toBeGreaterThanOrEqual(300);
    expect(c.resources?.limits).toBeUndefined();
    const hostPaths = Object.fromEntries(
      (pod.volumes ?? []).filter((v) => v.hostPath).map((v) => [v.hostPath!.path, v.name]),
    );
    const mountOf = (volume: string) => c.volumeMounts!.find((m) => m.name === volume)!;
    for (const path of ['/var/lib/aenv', '/run/aenv', '/sys/fs/cgroup', '/dev', '/lib/modules']) {
      expect(hostPaths[path], `hostPath ${path}`).toBeDefined();
      expect(mountOf(hostPaths[path]!).mountPath).toBe(path);
    }
    expect(mountOf(hostPaths['/lib/modules']!).readOnly).toBe(true);
    expect(c.env).toContainEqual({
      name: 'AENV_NODE_ID',
      valueFrom: { fieldRef: { fieldPath: 'metadata.name' } },
    });
    expect(c.args).toEqual(['server', '--config', '/etc/aenv/node.toml']);
    // The secrets every node of the cluster must share (docs/cluster.md#secrets-that-must-be-shared).
    for (const [name, key] of [
      ['AENV_SANDBOX_ACCESS_TOKEN_HASH_SEED', 'sandbox-access-token-hash-seed'],
      ['AENV_SNAPSHOT_RECORD_SIGNING_SECRET', 'snapshot-record-signing-secret'],
      ['AENV_SECRETS_ENCRYPTION_KEY', 'secrets-encryption-key'],
    ])
      expect(c.env).toContainEqual({
        name,
        valueFrom: { secretKeyRef: { name: expect.stringMatching(/^agentenv-runtime-secrets/), key } },
      });
    expect(c.volumeMounts).toContainEqual(
      expect.objectContaining({ mountPath: '/run/secrets', readOnly: true }),
    );
  });

  it('scheduler.json discovers the headless node Service on the node port; gateway.json points at the scheduler', () => {
    const sched = JSON.parse(
      (find(base, 'ConfigMap', 'agentenv-scheduler-config').data as Record<string, string>)[
        'scheduler.json'
      ]!,
    );
    const kube = sched.scheduler.discovery.kubernetes;
    expect(sched.scheduler.discovery.mode).toBe('kubernetes');
    const nodes = find(base, 'Service', kube.service_name) as K8sObject & {
      spec: { clusterIP: string; ports: { port: number }[] };
    };
    expect(nodes.spec.clusterIP).toBe('None');
    expect(nodes.metadata.namespace).toBe(kube.namespace);
    expect(nodes.spec.ports.map((p) => p.port)).toContain(kube.port);
    const [redisHost, redisPort] = sched.scheduler.redis_addr.split(':');
    const redis = find(base, 'Service', redisHost) as K8sObject & { spec: { ports: { port: number }[] } };
    expect(redis.spec.ports.map((p) => String(p.port))).toContain(redisPort);

    const gw = JSON.parse(
      (find(base, 'ConfigMap', 'agentenv-gateway-config').data as Record<string, string>)['gateway.json']!,
    );
    const [host, port] = gw.gateway.scheduler_addr.split(':');
    const schedSvc = find(base, 'Service', host) as K8sObject & {
      spec: { ports: { name: string; port: number }[] };
    };
    expect(schedSvc.spec.ports.find((p) => p.name === 'grpc')!.port).toBe(Number(port));
  });

  it('the node config loads without a warning and reports to the scheduler Service', () => {
    const dir = mkdtempSync(join(work, 'node-'));
    for (const objects of [base, withS3 ?? []]) {
      const cm = objects.find(
        (o) => o.kind === 'ConfigMap' && baseName(o.metadata.name) === 'agentenv-node-config',
      );
      if (!cm) continue;
      const file = join(dir, 'node.toml');
      writeFileSync(file, (cm.data as Record<string, string>)['node.toml']!);
      const loaded = loadConfig({ configPath: file, env: { AENV_NODE_ID: 'agentenv-node-x1y2z' } });
      expect(loaded.warnings).toEqual([]);
      expect(loaded.config.runtime.criu_path).toBe('/opt/aenv/criu/current/bin/criu');
      expect(loaded.config.runtime.tools_dir).toBe('/opt/aenv/tools');
      expect(loaded.config.observability.scheduler_report.enabled).toBe(true);
      const endpoint = new URL(loaded.config.cluster.scheduler_endpoint!);
      const schedSvc = find(objects, 'Service', endpoint.hostname) as K8sObject & {
        spec: { ports: { port: number }[] };
      };
      expect(schedSvc.spec.ports.map((p) => p.port)).toContain(Number(endpoint.port));
    }
  });

  it('generate-secrets.sh writes private, distinct, valid secrets once and keeps them', () => {
    const dir = join(work, 'gen');
    const run = () => spawnSync(join(K8S, 'generate-secrets.sh'), [dir], { encoding: 'utf8' });
    expect(run().status).toBe(0);
    const read = (f: string) => readFileSync(join(dir, f), 'utf8');
    const files = [
      'api-key',
      'sandbox-access-token-hash-seed',
      'snapshot-record-signing-secret',
      'secrets-encryption-key',
    ];
    const first = files.map(read);
    expect(first[0]).toMatch(/^e2b_[0-9a-f]{64}$/);
    for (const hex of first.slice(1)) expect(hex).toMatch(/^[0-9a-f]{64}$/);
    expect(new Set(first).size).toBe(4);
    for (const f of files) expect(statSync(join(dir, f)).mode & 0o777).toBe(0o600);
    expect(run().stdout).toMatch(/kept/);
    expect(files.map(read)).toEqual(first);
  });

  it('no secret value is committed: the generators read files git ignores', () => {
    const r = spawnSync('git', ['-C', REPO, 'check-ignore', '-q', 'deploy/k8s/base/secrets/api-key'], {});
    expect(r.status).toBe(0);
    const r2 = spawnSync(
      'git',
      ['-C', REPO, 'check-ignore', '-q', 'deploy/k8s/components/s3-repository/secrets/credentials.json'],
      {},
    );
    expect(r2.status).toBe(0);
  });
});
