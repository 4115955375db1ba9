// A small stand-in for the Kubernetes API server, on loopback: list and watch of EndpointSlices and Pods in
// one namespace, label selectors matched literally (the value the scheduler must send), watch events pushed
// by the test. Enough for @kubernetes/client-node informers; nothing more.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { writeFileSync } from 'node:fs';

type Kind = 'endpointslices' | 'pods';
type KubeObject = {
  metadata: { name: string; namespace?: string; labels?: Record<string, string>; resourceVersion?: string };
} & Record<string, unknown>;

interface Watcher {
  kind: Kind;
  selector: string;
  res: ServerResponse;
}

export class FakeKubeApi {
  #server: Server | undefined;
  #objects: Record<Kind, Map<string, { object: KubeObject; selectors: Set<string> }>> = {
    endpointslices: new Map(),
    pods: new Map(),
  };
  #watchers = new Set<Watcher>();
  #version = 1;
  /** Every request path and query, for assertions on what the client asked. */
  readonly requests: string[] = [];
  port = 0;

  constructor(readonly namespace: string) {}

  async start(): Promise<void> {
    this.#server = createServer((req, res) => this.#handle(req, res));
    await new Promise<void>((resolve) => this.#server!.listen(0, '127.0.0.1', () => resolve()));
    this.port = (this.#server.address() as AddressInfo).port;
  }

  async stop(): Promise<void> {
    for (const w of this.#watchers) w.res.end();
    this.#server?.closeAllConnections();
    await new Promise<void>((resolve) => (this.#server ? this.#server.close(() => resolve()) : resolve()));
  }

  /** A kubeconfig pointing at this server, written to `path`. */
  writeKubeconfig(path: string): void {
    writeFileSync(
      path,
      [
        'apiVersion: v1',
        'kind: Config',
        // client-node refuses plain http unless TLS verification is off for the cluster.
        'clusters: [{name: fake, cluster: {server: "http://127.0.0.1:' +
          this.port +
          '", insecure-skip-tls-verify: true}}]',
        'users: [{name: test, user: {}}]',
        `contexts: [{name: test, context: {cluster: fake, user: test, namespace: ${this.namespace}}}]`,
        'current-context: test',
        '',
      ].join('\n'),
      { mode: 0o600 },
    );
  }

  /** Adds or replaces an object listed under each of `selectors`, telling the watchers. */
  put(kind: Kind, object: KubeObject, selectors: string[]): void {
    const name = object.metadata.name;
    const existed = this.#objects[kind].has(name);
    object.metadata.namespace = this.namespace;
    object.metadata.resourceVersion = String(++this.#version);
    this.#objects[kind].set(name, { object, selectors: new Set(selectors) });
    this.#notify(kind, existed ? 'MODIFIED' : 'ADDED', object, selectors);
  }

  delete(kind: Kind, name: string): void {
    const entry = this.#objects[kind].get(name);
    if (!entry) return;
    this.#objects[kind].delete(name);
    entry.object.metadata.resourceVersion = String(++this.#version);
    this.#notify(kind, 'DELETED', entry.object, [...entry.selectors]);
  }

  #notify(kind: Kind, type: string, object: KubeObject, selectors: string[]): void {
    for (const w of this.#watchers)
      if (w.kind === kind && selectors.includes(w.selector))
        w.res.write(JSON.stringify({ type, object }) + '\n');
  }

  #handle(req: IncomingMessage, res: ServerResponse): void {
    const url = new URL(req.url ?? '/', 'http://fake');
    this.requests.push(`${url.pathname}?${url.searchParams.toString()}`);
    const paths: Record<string, Kind> = {
      [`/apis/discovery.k8s.io/v1/namespaces/${this.namespace}/endpointslices`]: 'endpointslices',
      [`/api/v1/namespaces/${this.namespace}/pods`]: 'pods',
    };
    const kind = paths[url.pathname];
    if (req.method !== 'GET' || !kind) {
      res
        .writeHead(404, { 'content-type': 'application/json' })
        .end(JSON.stringify({ kind: 'Status', code: 404 }));
      return;
    }
    const selector = url.searchParams.get('labelSelector') ?? '';
    if (url.searchParams.get('watch') === 'true') {
      res.writeHead(200, { 'content-type': 'application/json', 'transfer-encoding': 'chunked' });
      res.flushHeaders();
      const watcher = { kind, selector, res };
      this.#watchers.add(watcher);
      req.on('close', () => this.#watchers.delete(watcher));
      return;
    }
    const items = [...this.#objects[kind].values()]
      .filter((e) => e.selectors.has(selector))
      .map((e) => e.object);
    res.writeHead(200, { 'content-type': 'application/json' }).end(
      JSON.stringify({
        kind: kind === 'pods' ? 'PodList' : 'EndpointSliceList',
        apiVersion: kind === 'pods' ? 'v1' : 'discovery.k8s.io/v1',
        metadata: { resourceVersion: String(this.#version) },
        items,
      }),
    );
  }
}
