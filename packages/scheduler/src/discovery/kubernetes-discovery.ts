// Kubernetes discovery: list+watch the headless node Service's EndpointSlices (and, when selectors are
// configured, the pods they match) with @kubernetes/client-node informers, and republish the node set on
// every change. In a pod it uses the service account; elsewhere $KUBECONFIG / ~/.kube/config.
import {
  CoreV1Api,
  DiscoveryV1Api,
  KubeConfig,
  makeInformer,
  type Informer,
  type KubernetesObject,
  type ObjectCache,
  type V1EndpointSlice,
  type V1Pod,
} from '@kubernetes/client-node';
import type { KubernetesDiscoveryConfig } from '../config/cluster-config.js';
import type { Logger } from '../log.js';
import { nodesFromEndpointSlices, type DiscoveredNodes } from './endpoint-slices.js';

const RETRY_MIN_MS = 1000;
const RETRY_MAX_MS = 30_000;

type Watched<T extends KubernetesObject> = Informer<T> & ObjectCache<T>;

interface Source<T extends KubernetesObject> {
  informer: Watched<T>;
  listed: boolean;
  retryMs: number;
  timer?: NodeJS.Timeout;
}

function loadKubeConfig(): KubeConfig {
  const kc = new KubeConfig();
  if (process.env.KUBERNETES_SERVICE_HOST && !process.env.KUBECONFIG) kc.loadFromCluster();
  else kc.loadFromDefault();
  return kc;
}

export class KubernetesDiscovery {
  #sources: Source<KubernetesObject>[] = [];
  #stopped = false;
  #slices: Source<V1EndpointSlice>;
  #ignored: Source<V1Pod> | undefined;
  #noSchedule: Source<V1Pod> | undefined;

  constructor(
    private readonly cfg: KubernetesDiscoveryConfig,
    private readonly publish: (nodes: DiscoveredNodes) => void,
    private readonly log: Logger,
    kubeConfig: KubeConfig = loadKubeConfig(),
  ) {
    const ns = cfg.namespace;
    const discovery = kubeConfig.makeApiClient(DiscoveryV1Api);
    const core = kubeConfig.makeApiClient(CoreV1Api);
    const sliceSelector = `kubernetes.io/service-name=${cfg.serviceName}`;
    this.#slices = this.#source(
      kubeConfig,
      `/apis/discovery.k8s.io/v1/namespaces/${encodeURIComponent(ns)}/endpointslices`,
      () => discovery.listNamespacedEndpointSlice({ namespace: ns, labelSelector: sliceSelector }),
      sliceSelector,
      'endpointslices',
    );
    const pods = (selector: string, what: string) =>
      this.#source(
        kubeConfig,
        `/api/v1/namespaces/${encodeURIComponent(ns)}/pods`,
        () => core.listNamespacedPod({ namespace: ns, labelSelector: selector }),
        selector,
        what,
      );
    if (cfg.ignorePodSelector.trim() !== '')
      this.#ignored = pods(cfg.ignorePodSelector.trim(), 'ignored pods');
    if (cfg.noSchedulePodSelector.trim() !== '')
      this.#noSchedule = pods(cfg.noSchedulePodSelector.trim(), 'no-schedule pods');
  }

  #source<T extends KubernetesObject>(
    kc: KubeConfig,
    path: string,
    list: () => Promise<{ items: T[]; metadata?: { resourceVersion?: string } }>,
    labelSelector: string,
    what: string,
  ): Source<T> {
    const source = {} as Source<T>;
    source.listed = false;
    source.retryMs = RETRY_MIN_MS;
    source.informer = makeInformer<T>(
      kc,
      path,
      async () => {
        const result = await list();
        source.listed = true;
        source.retryMs = RETRY_MIN_MS;
        return result as never;
      },
      labelSelector,
    );
    const changed = () => this.#republish();
    source.informer.on('add', changed);
    source.informer.on('update', changed);
    source.informer.on('delete', changed);
    source.informer.on('error', (err: unknown) => {
      if (this.#stopped) return;
      this.log.warn(
        { what, err: err instanceof Error ? err.message : String(err), retryInMs: source.retryMs },
        'kubernetes watch failed; retrying',
      );
      source.timer = setTimeout(() => void source.informer.start().then(changed), source.retryMs);
      source.timer.unref();
      source.retryMs = Math.min(source.retryMs * 2, RETRY_MAX_MS);
    });
    this.#sources.push(source as unknown as Source<KubernetesObject>);
    return source;
  }

  /** Starts every watch; resolves once each has been tried once (failures keep retrying). */
  async start(): Promise<void> {
    await Promise.all(this.#sources.map((s) => s.informer.start()));
    this.#republish();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    for (const s of this.#sources) {
      clearTimeout(s.timer);
      await s.informer.stop();
    }
  }

  /** Every watch has listed once: before that the node set would be a guess. */
  get synced(): boolean {
    return this.#sources.every((s) => s.listed);
  }

  #republish(): void {
    if (this.#stopped || !this.synced) return;
    const ns = this.cfg.namespace;
    const nodes = nodesFromEndpointSlices(this.#slices.informer.list(ns), {
      port: this.cfg.port,
      scheme: this.cfg.scheme,
      ignored: this.#ignored ? (pod) => this.#ignored!.informer.get(pod, ns) !== undefined : undefined,
      noSchedule: this.#noSchedule
        ? (pod) => this.#noSchedule!.informer.get(pod, ns) !== undefined
        : undefined,
    });
    this.log.debug(
      { active: nodes.active.length, lingering: nodes.lingering.length },
      'kubernetes nodes refreshed',
    );
    this.publish(nodes);
  }
}
