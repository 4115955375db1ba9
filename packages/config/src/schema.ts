import { bool, command, int, num, oneOf, path, section, str, strList } from './field.js';
import { isHttpUrl, isListenAddr, LISTEN_ADDR_RULE } from './net.js';

const listenAddr = { test: isListenAddr, rule: LISTEN_ADDR_RULE, label: '"host:port"' };
const listenAddrOrEmpty = {
  test: (v: string) => v === '' || isListenAddr(v),
  rule: `${LISTEN_ADDR_RULE} or "" (disabled)`,
  label: '"host:port" or ""',
};
const httpUrl = { test: isHttpUrl, rule: 'must be an http:// or https:// URL', label: 'http(s) URL' };
const ALIAS_RE = /^[A-Za-z0-9_-]+$/;
const resourcePrefix = {
  test: (v: string) => /^[a-z][a-z0-9]{0,7}$/.test(v),
  rule: 'must be 1-8 characters [a-z0-9] starting with a letter (it prefixes 15-character interface names)',
  label: 'prefix',
};

export const DEFAULT_BOOT_ARGS =
  'console=ttyS0 reboot=k panic=1 pci=off mitigations=off init=/init damon_reclaim.enabled=Y ' +
  'damon_reclaim.min_age=60000000 damon_reclaim.quota_ms=100 damon_reclaim.quota_sz=1073741824 ' +
  'damon_reclaim.quota_reset_interval_ms=1000 damon_reclaim.wmarks_high=900 damon_reclaim.wmarks_mid=700 ' +
  'damon_reclaim.wmarks_low=200 damon_reclaim.skip_anon=Y damon_reclaim.wmarks_interval=5000000';

const poolComponent = (doc: string, microvmOnly: boolean) =>
  section(
    doc,
    {
      enabled: bool({ default: true, doc: 'Use this pool at all.' }),
      maintenance_enabled: bool({ default: true, doc: 'Refill the pool in the background.' }),
      startup_prewarm: bool({ default: true, doc: 'Fill the pool to the low watermark during startup.' }),
    },
    { microvmOnly },
  );

/**
 * Every configuration key: the reference's plus aenv's additions. Types, defaults, docs, default.toml and
 * docs/configuration.md are all derived from this tree.
 */
export const CONFIG_SCHEMA = section('Top-level keys.', {
  home_path: path({
    default: '/var/lib/aenv',
    env: 'AENV_HOME_PATH',
    doc: 'Base directory for persistent state ($AENV_HOME); relative = against the config file directory.',
  }),
  runtime_path: path({
    default: '/run/aenv',
    env: 'AENV_RUNTIME_PATH',
    commented: true,
    doc: 'Transient state: network namespace mounts and sockets ($AENV_RUNTIME).',
  }),
  deps_path: path({
    default: '$AENV_HOME/deps',
    env: 'AENV_DEPS_PATH',
    commented: true,
    doc: 'Runtime dependencies the server installs (CRIU prefix, tools directory, ...).',
  }),
  virtualization_mode: oneOf(['container', 'kvm', 'pvm'], {
    default: 'container',
    env: 'AENV_VIRTUALIZATION_MODE',
    doc: 'Sandbox driver. Paused sandboxes and snapshots restore only in the mode that created them.',
  }),
  api_addr: str({
    default: '0.0.0.0:8000',
    env: 'API_ADDR',
    aenv: true,
    trim: true,
    check: listenAddr,
    doc: 'Listen address of the HTTP API and proxy (the reference reads only the API_ADDR variable).',
  }),
  log_format: oneOf(['compact', 'pretty', 'json'], {
    default: 'compact',
    env: 'AENV_LOG_FORMAT',
    aenv: true,
    doc: 'Log output: one line per event, multi-line, or raw JSON.',
  }),
  log_level: oneOf(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], {
    default: 'info',
    env: 'AENV_LOG_LEVEL',
    aenv: true,
    doc: 'Lowest log level written.',
  }),

  resource_prefix: str({
    default: 'aenv',
    env: 'AENV_RESOURCE_PREFIX',
    aenv: true,
    trim: true,
    check: resourcePrefix,
    doc: 'Prefix of the host objects this node creates (netns files, veths, nft table, cgroups). Nodes sharing a host need distinct values (and distinct network.internal CIDRs).',
  }),

  api: section(
    'Control-plane HTTP API.',
    {
      body_limit_bytes: int({
        default: 1048576,
        min: 1,
        aenv: true,
        doc: 'Largest accepted control-plane JSON request body, in bytes.',
      }),
      idempotency_retention_secs: int({
        default: 86400,
        min: 1,
        aenv: true,
        doc: 'How long the answer of a sandbox create sent with an Idempotency-Key is kept (in state.db, across restarts): a retry with the same key and request within this time gets that answer instead of a second sandbox.',
      }),
      idempotency_max_keys: int({
        default: 10000,
        min: 1,
        aenv: true,
        doc: 'Most Idempotency-Key answers kept; past it the oldest are dropped first (a retry with a dropped key creates again).',
      }),
    },
    { aenv: true },
  ),

  limits: section(
    'Admission limits: what one API caller may ask of this node. A request above a limit gets a 4xx naming the key (docs/security.md).',
    {
      max_cpu_count: int({
        default: 0,
        min: 0,
        aenv: true,
        doc: "Largest cpuCount of a template build and of the template a sandbox starts from; 0 = the host's CPU count (at least machine.vcpu_count).",
      }),
      max_memory_mb: int({
        default: 0,
        min: 0,
        aenv: true,
        doc: "Largest memoryMB of a template build and of the template a sandbox starts from; 0 = the host's memory (at least machine.mem_size_mib).",
      }),
      max_disk_size_mb: int({
        default: 65536,
        min: 1024,
        aenv: true,
        doc: 'Largest diskSizeMB of the template or snapshot a sandbox starts from (e.g. a record from a shared repository).',
      }),
      max_metadata_entries: int({
        default: 64,
        min: 0,
        aenv: true,
        doc: 'Most metadata entries one sandbox may carry.',
      }),
      max_metadata_bytes: int({
        default: 16384,
        min: 0,
        aenv: true,
        doc: "Largest total size of a sandbox's metadata keys and values, in UTF-8 bytes.",
      }),
      max_env_vars: int({
        default: 256,
        min: 0,
        aenv: true,
        doc: 'Most envVars entries of a sandbox create.',
      }),
      max_env_var_bytes: int({
        default: 32768,
        min: 1,
        max: 131071,
        aenv: true,
        doc: 'Largest KEY=value of one envVars entry or template ENV/ARG step, in bytes (Linux refuses to run a program given one string over 128 KiB: E2BIG).',
      }),
      max_env_vars_bytes: int({
        default: 262144,
        min: 1,
        max: 1048576,
        aenv: true,
        doc: "Largest total of a sandbox create's envVars (KEY=value strings), in bytes; every command of the sandbox carries them.",
      }),
      max_build_steps: int({
        default: 256,
        min: 1,
        aenv: true,
        doc: 'Most steps of one template build.',
      }),
      max_fork_count: int({
        default: 16,
        min: 1,
        max: 100,
        aenv: true,
        doc: 'Largest count of one fork request (the API accepts 1-100); at most max_concurrent_creates.',
      }),
      max_concurrent_creates: int({
        default: 32,
        min: 1,
        aenv: true,
        doc: 'Sandbox creates and fork children in progress at once on this node; more get 429 (retry later).',
      }),
      max_concurrent_restores: int({
        default: 4,
        min: 1,
        aenv: true,
        doc: 'Memory restores (CRIU) run at once on this node: resumes from disk, fork children, snapshot and template launches. More wait their turn, in order (phase restore-wait): each is CPU-bound, so running a burst all at once ends no sooner and makes every one of them wait for the last.',
      }),
    },
    { aenv: true },
  ),

  runtime: section(
    'Container driver (virtualization_mode = "container").',
    {
      runc_path: command({
        default: 'runc',
        aenv: true,
        doc: 'OCI runtime binary (name looked up in PATH, or a path).',
      }),
      criu_path: path({
        default: '',
        aenv: true,
        doc: 'CRIU binary; empty = <deps_path>/criu/current/bin/criu.',
      }),
      lazy_restore_min_mib: int({
        default: 0,
        min: 0,
        max: 1048576,
        aenv: true,
        doc: 'Restore a memory checkpoint holding more than this many MiB of pages lazily: the sandbox runs before its memory is read, a `criu lazy-pages` daemon serves pages on first touch and fetches the rest in the background. 0 = never (every restore reads all pages first). Needs vm.unprivileged_userfaultfd = 1 on the host, else it is logged and not used; a lazy restore that fails is logged and done eagerly (docs/runtime.md#lazy-restore).',
      }),
      uid_map_host_start: int({
        default: 100000,
        min: 1,
        aenv: true,
        doc: "First host uid/gid of aenv's id span. Its first uid_map_size ids own the cached image layers (no sandbox runs as them); each sandbox then gets its own range of uid_map_size ids after them. The whole span must not overlap /etc/subuid or /etc/subgid (the server refuses to start), nor another aenv server's on the same host.",
      }),
      uid_map_size: int({
        default: 65536,
        min: 1,
        aenv: true,
        doc: 'Number of uids/gids mapped into each sandbox (the size of every range).',
      }),
      uid_ranges: int({
        default: 1024,
        min: 1,
        aenv: true,
        doc: 'Number of per-sandbox uid/gid ranges: how many sandboxes (running, paused, pre-started and template builds) a node can hold at once. The span is uid_map_host_start .. uid_map_host_start + uid_map_size × (1 + uid_ranges) - 1.',
      }),
      pids_limit: int({
        default: 0,
        min: 0,
        aenv: true,
        doc: 'Maximum number of tasks (processes and threads) per sandbox (cgroup pids.max); 0 = node_pids_limit / 16, at least 64 and at most 4096 (1024 with pid_max 32768).',
      }),
      node_pids_limit: int({
        default: 0,
        min: 0,
        aenv: true,
        doc: "Maximum number of tasks of all sandboxes together (pids.max of their parent cgroup), so that sandboxes at their own limits cannot use up the host's PIDs; 0 = half of the kernel's pid_max. Must stay below pid_max.",
      }),
      nofile_limit: int({
        default: 65536,
        min: 64,
        aenv: true,
        doc: "RLIMIT_NOFILE (soft = hard) of sandbox processes; sandboxes cannot raise it. At most the server's own hard limit (lower is used, with a warning).",
      }),
      inotify_max_instances: int({
        default: 128,
        min: 1,
        aenv: true,
        doc: "inotify instances per user inside each sandbox (the sandbox user namespace's user.max_inotify_instances). All sandboxes also share the host's fs.inotify.max_user_instances of root: scripts/setup-host.sh raises it (see docs/security.md).",
      }),
      inotify_max_watches: int({
        default: 65536,
        min: 1,
        aenv: true,
        doc: 'inotify watches per user inside each sandbox (user.max_inotify_watches of its user namespace); shared host budget: fs.inotify.max_user_watches.',
      }),
      seccomp_profile: path({
        default: '',
        aenv: true,
        doc: "Seccomp profile file (Moby/Docker JSON format) for sandboxes; empty = aenv's built-in profile (Docker's default denials and more). aenv's own denials apply on top of a file; a file that cannot be read or parsed stops the server from starting.",
      }),
      nested_containers: bool({
        default: false,
        aenv: true,
        doc: 'Let sandboxes create user namespaces and mount inside them (podman, bwrap, rootless buildah inside a sandbox). Off: unshare/clone of namespaces, mount and setns are refused by seccomp and user.max_user_namespaces is 0. Widens the kernel surface a sandbox reaches.',
      }),
      cap_net_raw: bool({
        default: false,
        aenv: true,
        doc: 'Give sandboxes CAP_NET_RAW (raw and packet sockets: classic ping, traceroute, packet crafting on the sandbox link). Off by default, as raw sockets let a sandbox forge packets.',
      }),
      no_new_privileges: bool({
        default: false,
        aenv: true,
        doc: 'Set no_new_privs on sandbox processes: setuid binaries and file capabilities (sudo, su) stop working inside; the e2b SDK\'s user "user" then cannot become root. See docs/security.md for the trade-off.',
      }),
      cow_volume: oneOf(['auto', 'host', 'loop-btrfs'], {
        default: 'auto',
        aenv: true,
        doc: 'Where sandbox upper dirs live: auto = host filesystem if it can reflink, else a loop-file btrfs volume.',
      }),
      cow_volume_size_gb: int({
        default: 64,
        min: 1,
        aenv: true,
        doc: 'Size of the loop-file btrfs volume (sparse) when one is created.',
      }),
      default_disk_size_mb: int({
        default: 20480,
        min: 1024,
        aenv: true,
        doc: 'diskSizeMB of container sandboxes (a multiple of 1024): what each may write, when disk_limits applies.',
      }),
      disk_limits: bool({
        default: true,
        aenv: true,
        doc: "Enforce each sandbox's diskSizeMB as a limit on what it writes. true: btrfs quota groups on aenv's own loop volume (turned on), on a host btrfs (must be on already), or XFS project quotas (host XFS mounted with prjquota); anywhere else the server refuses to start (cow_volume = \"auto\" then uses aenv's own volume). false: not enforced; quotas turned off on aenv's own loop volume.",
      }),
      tools_dir: path({
        default: '',
        aenv: true,
        doc: 'Read-only tools directory mounted at /agentenv (node + envd); empty = built under <deps_path>/tools.',
      }),
    },
    { aenv: true },
  ),

  firecracker: section(
    'Firecracker microVM binary and guest boot settings.',
    {
      binary_path: path({
        commented: true,
        example: '/opt/aenv/bin/firecracker',
        doc: 'Use this Firecracker executable instead of downloading one (readable, non-empty, executable).',
      }),
      version: str({
        commented: true,
        trim: true,
        example: 'v1.15.1',
        doc: 'Firecracker version to download instead of the manifest one.',
      }),
      url: str({
        commented: true,
        trim: true,
        example: 'https://downloads.example.com/firecracker-{version}-{arch}.tgz',
        doc: 'Download URL template for Firecracker ({version} and {arch} are substituted).',
      }),
      boot_args: str({
        default: DEFAULT_BOOT_ARGS,
        doc: 'Complete guest kernel command line; setting it replaces the default, it does not append.',
      }),
      allowed_extra_boot_args_prefixes: strList({
        default: [],
        commented: true,
        doc: 'Prefixes allowed in cold-start extraBootArgs; empty = all extra boot args are dropped.',
      }),
      socket_timeout_secs: int({
        default: 3,
        min: 0,
        doc: 'How long to wait for the Firecracker API socket, in seconds.',
      }),
      socket_poll_ms: int({ default: 1, min: 1, doc: 'API socket polling interval in milliseconds.' }),
      work_dir: path({
        default: '$AENV_HOME/firecracker-work',
        env: 'AENV_FIRECRACKER_WORK_DIR',
        commented: true,
        doc: 'Per-sandbox work directories (API socket, writable upper layers).',
      }),
      serial_dir: path({
        default: '$AENV_HOME/logs/serial',
        env: 'AENV_FIRECRACKER_SERIAL_DIR',
        commented: true,
        doc: 'Per-sandbox serial and Firecracker logs.',
      }),
      log_level: oneOf(['Error', 'Warning', 'Info', 'Debug', 'Trace'], {
        commented: true,
        example: 'Info',
        doc: 'Firecracker log level; unset or empty disables firecracker.log.',
      }),
    },
    { microvmOnly: true },
  ),

  kernel: section(
    'Guest kernel for microVMs.',
    {
      image_path: path({
        commented: true,
        example: '/opt/aenv/vmlinux.bin',
        doc: 'Use this uncompressed kernel image instead of downloading one.',
      }),
      version: str({
        commented: true,
        trim: true,
        example: 'vmlinux-6.1.175',
        doc: 'Kernel version to download instead of the manifest one.',
      }),
      url: str({
        commented: true,
        trim: true,
        example: 'https://downloads.example.com/{version}/vmlinux.bin',
        doc: 'Download URL template for the kernel.',
      }),
    },
    { microvmOnly: true },
  ),

  tools: section('The tools drive (envd and helpers) mounted into every sandbox.', {
    version: str({
      commented: true,
      trim: true,
      container: false,
      example: '0.1.0-custom.1',
      doc: 'Tools drive release (SemVer without build metadata); required with drive_path or url.',
    }),
    url: str({
      commented: true,
      trim: true,
      container: false,
      example: 'registry.example.com/aenv-tools:{version}',
      doc: 'Registry reference template for the tools drive.',
    }),
    drive_path: path({
      commented: true,
      container: false,
      example: '../env/tools/tools.ext4',
      doc: 'Import this ext4 tools drive instead of downloading one.',
    }),
    control_plane_port: int({
      default: 49983,
      min: 1,
      max: 65535,
      doc: 'Port envd listens on inside each sandbox.',
    }),
  }),

  image: section('Images.', {
    resolver: section('Turning image references into local images.', {
      default_image: str({
        default: 'ubuntu:24.04',
        doc: 'Image used when a template build gives no fromImage (blank = ubuntu:24.04).',
      }),
      search_registries: strList({
        default: ['docker.io', 'ghcr.io'],
        doc: 'Registries tried, in order, to expand short image names.',
      }),
      convert_standard_oci: bool({
        default: true,
        container: false,
        doc: 'Convert standard OCI layers to overlaybd locally; false = require overlaybd-native images.',
      }),
      allowed_registries: strList({
        commented: true,
        example: ['registry.example.com'],
        doc: 'Registry allowlist: unset = any registry, [] = none; rejected references are client errors.',
      }),
      try_referrers_overlaybd_prefixes: strList({
        default: [],
        container: false,
        doc: 'Image-reference prefixes (starts_with) for which OCI referrers are searched for overlaybd variants.',
      }),
      insecure_registries: strList({
        default: [],
        aenv: true,
        doc: 'Registries reached over plain HTTP, e.g. "127.0.0.1:5000".',
      }),
      registry_endpoints: strList({
        default: [],
        aenv: true,
        doc: 'Registry API base URLs: "<registry>=<http(s) URL>" entries, for mirrors and for registries whose API is not served at their name. docker.io is built in (https://registry-1.docker.io); an entry for it (a mirror) replaces that.',
      }),
      local_image_dirs: strList({
        default: ['/var/cache/aenv/images'],
        aenv: true,
        doc: 'Absolute directories that oci:<dir> and oci-archive:<file> references must lie under (read without following symlinks below them); [] = local references are refused.',
      }),
    }),
    limits: section(
      'Limits on what one image pull may unpack.',
      {
        max_layer_mb: int({
          default: 16384,
          min: 1,
          aenv: true,
          doc: 'Largest uncompressed size of one layer, in MiB; a larger layer fails the pull (413).',
        }),
        max_image_mb: int({
          default: 32768,
          min: 1,
          aenv: true,
          doc: 'Largest uncompressed size of all layers of one image (and of an oci-archive file), in MiB.',
        }),
        max_layer_entries: int({
          default: 500000,
          min: 1,
          aenv: true,
          doc: 'Most files, directories and links one layer may hold.',
        }),
      },
      { aenv: true },
    ),
    cache: section('Local image cache.', {
      root_dir: path({ default: '$AENV_HOME/image-cache', commented: true, doc: 'Root of the image cache.' }),
      capacity_gb: int({
        min: 1,
        shipped: 100,
        doc: 'Cache budget in GiB for LRU eviction (only with GC); unset = no capacity eviction.',
      }),
      remote_blocks: section(
        'overlaybd remote block cache.',
        {
          max_size_gb: int({
            default: 10,
            shipped: 100,
            min: 1,
            doc: 'Maximum remote block cache size in GiB.',
          }),
        },
        { microvmOnly: true },
      ),
      gc: section('Background image-cache garbage collection.', {
        enabled: bool({
          default: true,
          doc: 'Reconcile the cache and delete unreferenced layers in the background.',
        }),
        interval_secs: int({ default: 1800, min: 0, doc: 'Seconds between GC runs (0 = 1800).' }),
        min_age_secs: int({
          default: 600,
          min: 0,
          doc: 'Images idle for less than this are never evicted for capacity.',
        }),
        high_watermark_ratio: num({
          default: 0.95,
          doc: 'Start capacity eviction above this fraction of capacity_gb.',
        }),
        low_watermark_ratio: num({ default: 0.7, doc: 'Evict down to this fraction of capacity_gb.' }),
      }),
    }),
  }),

  p2p: section(
    'Experimental peer-to-peer artifact transport.',
    {
      enabled: bool({ default: false, doc: 'Master switch for P2P transport.' }),
      transport: oneOf(['iroh', 'disabled'], { default: 'iroh', doc: 'Transport implementation.' }),
      store_dir: path({ default: '$AENV_HOME/p2p/store', commented: true, doc: 'Local content store.' }),
      listen_addr: str({
        default: '0.0.0.0:0',
        trim: true,
        check: listenAddr,
        doc: 'Endpoint address; port 0 = any free port.',
      }),
      lookup_timeout_ms: int({ default: 5000, min: 1, doc: 'Peer lookup timeout in milliseconds.' }),
      fetch_timeout_ms: int({ default: 30000, min: 1, doc: 'Peer fetch timeout in milliseconds.' }),
      peer_discovery_refresh_interval_secs: int({
        default: 5,
        doc: 'Seconds between peer-list refreshes from the scheduler; values below 1 become 1.',
      }),
    },
    { microvmOnly: true },
  ),

  custom_extension: section('External lifecycle-hook service.', {
    url: str({
      env: 'AENV_CUSTOM_EXTENSION_URL',
      commented: true,
      trim: true,
      check: httpUrl,
      example: 'http://127.0.0.1:9090',
      doc: 'Base URL of the hook service (`POST {url}/sandbox-hook/*`, docs/hooks.md); unset = disabled and customExtensionParams are rejected.',
    }),
    timeout_ms: int({
      default: 5000,
      min: 1,
      commented: true,
      doc: 'Timeout of each hook call in milliseconds, answer included; a start or patch-params hook past it fails its operation.',
    }),
  }),

  events: section(
    'Lifecycle events (docs/events.md).',
    {
      webhooks: section(
        'Webhook delivery of lifecycle events (`/events/webhooks`, docs/events.md#webhooks).',
        {
          max_attempts: int({
            aenv: true,
            default: 4,
            min: 1,
            max: 100,
            doc: 'Deliveries of one event to one webhook before it is given up (the first included); E2B makes 4.',
          }),
          initial_backoff_ms: int({
            aenv: true,
            default: 10_000,
            min: 1,
            max: 3_600_000,
            doc: 'Wait before the first retry; each further retry waits twice as long, with random jitter (between half and all of it).',
          }),
          max_backoff_ms: int({
            aenv: true,
            default: 300_000,
            min: 1,
            max: 86_400_000,
            doc: 'Longest wait between two deliveries of one event.',
          }),
          timeout_ms: int({
            aenv: true,
            default: 10_000,
            min: 1,
            max: 300_000,
            doc: 'Time a receiver has to answer a delivery, connection and answer included; past it the attempt failed (errorClass timeout).',
          }),
          max_webhooks: int({
            aenv: true,
            default: 20,
            min: 0,
            max: 1000,
            doc: 'Webhooks this node keeps (all the nodes sharing a snapshot repository together: docs/events.md#in-a-cluster); a create beyond it is refused with a 400.',
          }),
          history_per_webhook: int({
            aenv: true,
            default: 1000,
            min: 1,
            max: 100_000,
            doc: 'Delivery attempts kept per webhook for its deliveries and stats; the oldest go first.',
          }),
          allow_loopback: bool({
            aenv: true,
            default: false,
            doc: "Accept webhook URLs on loopback (127.0.0.0/8, ::1, localhost); off, they are refused (docs/security.md#webhooks). The node's own API port is refused either way.",
          }),
        },
      ),
    },
    { aenv: true },
  ),

  cluster: section('Cluster membership.', {
    scheduler_endpoint: str({
      env: 'AENV_OBSERVABILITY_SCHEDULER_ENDPOINT',
      commented: true,
      trim: true,
      check: httpUrl,
      example: 'http://127.0.0.1:9090',
      doc: 'Scheduler gRPC endpoint (`http://host:port`) the node heartbeats to (docs/cluster.md#node-heartbeats); needed when observability.scheduler_report.enabled.',
    }),
  }),

  sandbox_proxy: section('Host-based routing into sandboxes.', {
    domains: strList({
      default: [],
      env: 'AENV_SANDBOX_PROXY_DOMAINS',
      doc: 'DNS suffixes for {port}-{sandboxID}.{domain} routing; the first is advertised to clients.',
    }),
    signed_url_max_lifetime_secs: int({
      default: 86400,
      min: 60,
      aenv: true,
      doc: 'Signed /files URLs: an expiration further away than this is refused, and a URL signed without expiration works only while its sandbox is younger than this.',
    }),
    signed_url_scan_hashes_per_sec: int({
      default: 200000,
      min: 100,
      aenv: true,
      doc: 'Budget for routing header-less signed /files URLs seen for the first time (one hash per running secure sandbox each); over it they get 429.',
    }),
  }),

  network: section('Sandbox networking.', {
    egress: section('Egress policy applied before per-sandbox rules.', {
      always_denied_cidrs: strList({
        default: [
          '10.0.0.0/8',
          '100.64.0.0/10',
          '127.0.0.0/8',
          '169.254.0.0/16',
          '172.16.0.0/12',
          '192.168.0.0/16',
        ],
        doc: 'IPv4 networks sandboxes can never reach, whatever their allowOut says. Added to the built-in denies (0.0.0.0/8, 127.0.0.0/8, 169.254.0.0/16, 100.100.100.200, 168.63.129.16, 192.0.0.192: cloud metadata and the host itself), which this list cannot remove.',
      }),
      resolvers: strList({
        default: [],
        doc: "DNS servers (`ip` or `ip:port`) the egress proxy resolves allowed domains with and the node resolver answers sandboxes from (docs/networking.md#domain-egress). Empty: the host's (/etc/resolv.conf). Answers in always_denied_cidrs, the internal CIDRs or on the host are never connected to.",
      }),
      proxy_listen_port: int({
        default: 0,
        min: 0,
        max: 65533,
        doc: 'First of the three host ports the egress proxy listens on (HTTP from port 80, TLS from port 443, then the SOCKS tunnel of sandboxes with an egressProxy, in that order); 0: ephemeral ports. Only redirected sandbox traffic reaches them.',
      }),
      dns_listen_port: int({
        default: 0,
        min: 0,
        max: 65535,
        doc: 'Host port (UDP and TCP) of the node resolver that answers the DNS of sandboxes with domain entries; 0: an ephemeral port.',
      }),
      upstream_ca_file: str({
        default: '',
        trim: true,
        aenv: true,
        doc: "PEM file of CA certificates the egress proxy also trusts when it forwards a request it intercepted for `network.rules` (docs/networking.md#credentials-at-the-edge), besides the host's bundle (/etc/ssl/certs/ca-certificates.crt or the like). Empty: the host's bundle only.",
      }),
    }),
    dns: section(
      'The resolver sandboxes are given.',
      {
        nameserver: str({
          default: '',
          trim: true,
          aenv: true,
          check: {
            test: (v) =>
              v === '' ||
              /^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}$/.test(v),
            rule: 'an IPv4 address, or empty',
            label: 'IPv4 address',
          },
          doc: "IPv4 address written as the sandboxes' nameserver; DNS (port 53) to it is the only DNS they may send, and only when their policy allows it. Empty: the host's first non-loopback IPv4 nameserver (/run/systemd/resolve/resolv.conf, then /etc/resolv.conf); none: no DNS.",
        }),
      },
      { aenv: true },
    ),
    internal: section('Internal address pools for sandbox network namespaces.', {
      host_interaction_cidr: str({
        default: '10.11.0.0/16',
        trim: true,
        doc: 'Addresses the host uses to reach sandboxes (at least 32768 addresses).',
      }),
      veth_cidr: str({
        default: '10.12.0.0/16',
        trim: true,
        doc: 'veth pair addresses (at least 65536 addresses).',
      }),
    }),
  }),

  machine: section('Default sandbox resources.', {
    mem_size_mib: int({ default: 1024, min: 128, doc: 'Default memory in MiB when a request gives none.' }),
    vcpu_count: int({ default: 2, min: 1, doc: 'Default CPU count when a request gives none.' }),
    disk_rate_limit: section(
      'virtio-blk rate limits.',
      {
        enabled: bool({ default: false, commented: true, doc: 'Apply the limits below.' }),
        bandwidth_bytes_per_sec: int({
          default: 0,
          min: 0,
          commented: true,
          doc: 'Sustained bandwidth; 0 = unlimited.',
        }),
        bandwidth_burst_bytes: int({
          default: 0,
          min: 0,
          commented: true,
          doc: 'One-time bandwidth burst at VM start.',
        }),
        iops: int({ default: 0, min: 0, commented: true, doc: 'Sustained IOPS; 0 = unlimited.' }),
        iops_burst: int({ default: 0, min: 0, commented: true, doc: 'One-time IOPS burst at VM start.' }),
      },
      { microvmOnly: true },
    ),
  }),

  envd: section('envd, the in-sandbox daemon.', {
    version: str({ default: '0.5.15', trim: true, doc: 'envd version reported to clients (envdVersion).' }),
    init_timeout_secs: int({
      default: 60,
      min: 1,
      doc: 'How long to wait for envd to become ready, in seconds.',
    }),
    poll_ms: int({ default: 3, min: 1, doc: 'envd readiness polling interval in milliseconds.' }),
  }),

  sandbox: section('Sandbox access tokens and the /secrets key.', {
    access_token_hash_seed: str({
      env: 'AENV_SANDBOX_ACCESS_TOKEN_HASH_SEED',
      envBlankIsValue: true,
      commented: true,
      secret: true,
      example: 'replace-with-a-long-random-secret',
      doc: 'Secret the envd and traffic tokens are derived from; unset = a managed seed under $AENV_HOME/secrets.',
    }),
    secrets_encryption_key: str({
      env: 'AENV_SECRETS_ENCRYPTION_KEY',
      envBlankIsValue: true,
      commented: true,
      secret: true,
      example: 'replace-with-64-hex-digits-the-same-on-every-node',
      doc: 'AES-256 key (64 hex digits) /secrets values are sealed with; every node of a cluster needs the same value. Unset = a managed key under $AENV_HOME/secrets (one node only).',
    }),
  }),

  volume: section('Persistent volumes (docs/volumes.md).', {
    max_size_mb: int({
      default: 262144,
      min: 1,
      doc: 'What one volume may hold, in MiB (a btrfs quota group or XFS project quota, where runtime.disk_limits is on).',
    }),
    max_volume_count: int({
      default: 4,
      min: 0,
      doc: 'How many volumes one sandbox may mount (volumeMounts); 0 = none.',
    }),
    storage: oneOf(['node', 'shared_dir'], {
      default: 'node',
      aenv: true,
      doc: 'Where volumes live: "node" = on this node\'s CoW volume (node-affine in a cluster); "shared_dir" = in volume.shared_dir, a directory every node of a cluster mounts (NFS in production): any node mounts any volume, max_size_mb is enforced only on content-API writes (docs/volumes.md).',
    }),
    shared_dir: path({
      commented: true,
      aenv: true,
      example: '/mnt/aenv-volumes',
      doc: 'The shared directory of storage = "shared_dir" (absolute; required then, refused otherwise): the same directory on every node, with the same runtime.uid_map_host_start.',
    }),
  }),

  orchestrator: section('Sandbox lifecycle.', {
    auto_evict_interval_ms: int({
      default: 1000,
      min: 1,
      doc: 'How often expired sandboxes are paused or killed, in ms.',
    }),
    default_sandbox_timeout_secs: int({
      default: 15,
      min: 0,
      doc: 'Sandbox timeout when a request gives none.',
    }),
    auto_resume_min_sandbox_timeout_secs: int({
      default: 300,
      min: 0,
      doc: 'Minimum timeout given to a sandbox the proxy resumes automatically.',
    }),
    persisted_sandbox_store_path: path({
      default: '$AENV_HOME/persisted-sandboxes',
      env: 'AENV_PERSISTED_SANDBOX_STORE_PATH',
      commented: true,
      doc: 'Where paused sandboxes are kept across restarts.',
    }),
    resident_pause_grace_secs: int({
      default: 30,
      min: 0,
      aenv: true,
      doc: 'How long a paused sandbox stays frozen in memory before its memory is released (0 = at once).',
    }),
    max_transition_wait_secs: int({
      default: 60,
      min: 1,
      aenv: true,
      doc: 'How long an operation waits for a sandbox in a transitional state.',
    }),
    paused_quota_mb: int({
      default: 0,
      min: 0,
      aenv: true,
      doc: 'Most bytes the pause artifacts (CRIU images + saved disks) of all paused sandboxes of this node may hold, in MiB; a pause past it is refused with 507 and the sandbox keeps running. 0 = half the size of the sandbox volume.',
    }),
    paused_retention_secs: int({
      default: 0,
      min: 0,
      aenv: true,
      doc: 'A sandbox paused this long is deleted (record, disk and checkpoint, as DELETE does). 0 = paused sandboxes are kept until deleted. With a shared repository it is recorded with each paused copy, and still applies once no node holds the sandbox (its node lost or drained; docs/cluster.md#sandboxes-held-by-no-node).',
    }),
  }),

  template_build: section(
    'Template builds.',
    {
      max_concurrent_builds: int({ default: 2, min: 1, aenv: true, doc: 'Builds run at once on this node.' }),
      base_template_alias: str({
        default: 'base',
        trim: true,
        aenv: true,
        check: { test: (v) => ALIAS_RE.test(v), rule: 'must match [A-Za-z0-9_-]+', label: 'alias' },
        doc: 'Alias under which base_template_image is registered.',
      }),
      base_template_image: str({
        default: 'oci:/var/cache/aenv/images/base:latest',
        aenv: true,
        doc: 'Image registered as the base template at first start when it exists (its resources follow [machine] and default_disk_size_mb at every start; nodes sharing a repository that start together register it once: the node that loses the race takes the one the other registered); empty disables.',
      }),
      max_upload_mb: int({
        default: 4096,
        min: 1,
        aenv: true,
        doc: 'Largest build-context archive (COPY/ADD files) one upload may send, in MiB.',
      }),
      upload_link_ttl_secs: int({
        default: 3600,
        min: 60,
        aenv: true,
        doc: 'How long an upload link handed out by GET /templates/{id}/files/{hash} stays valid.',
      }),
      upload_retention_hours: int({
        default: 168,
        min: 1,
        aenv: true,
        doc: 'Uploaded build contexts unused for this long are removed (checked at startup and every few minutes).',
      }),
      log_retention_hours: int({
        default: 720,
        min: 0,
        aenv: true,
        doc: 'Build logs older than this are removed (the template stays; its build status then shows no log lines). 0 = kept until the template is deleted.',
      }),
      artefacts_quota_mb: int({
        default: 10240,
        min: 0,
        aenv: true,
        doc: 'Most bytes build leftovers (build logs, uploaded build contexts, the build-step cache) may hold together, in MiB; past it the least recently used are removed first, and an upload that still does not fit is refused with 507. Built templates never count. 0 = no limit.',
      }),
      cache_max_entries: int({
        default: 64,
        min: 1,
        aenv: true,
        doc: 'Build-step results kept for layer caching (least recently used dropped first).',
      }),
      cache_max_age_hours: int({
        default: 168,
        min: 1,
        aenv: true,
        doc: 'Build-step results unused for this long are dropped.',
      }),
      max_build_secs: int({
        default: 3600,
        min: 1,
        aenv: true,
        doc: 'Deadline of one build from the moment it starts running; a build past it ends "error" and its sandbox is removed.',
      }),
      max_log_lines: int({
        default: 50000,
        min: 100,
        aenv: true,
        doc: 'Most log entries kept per build; further command output is dropped (the log says so).',
      }),
      max_log_mb: int({
        default: 8,
        min: 1,
        aenv: true,
        doc: 'Most log bytes kept per build, in MiB; further command output is dropped (the log says so).',
      }),
    },
    { aenv: true },
  ),

  snapshot: section('Snapshot repository.', {
    local_cache_path: path({
      default: '$AENV_HOME/snapshot-local-cache',
      env: 'AENV_SNAPSHOT_LOCAL_CACHE_PATH',
      commented: true,
      doc: 'Node-local cache of snapshot artifacts.',
    }),
    repository_backend: oneOf(['posix_fs', 'oss'], {
      default: 'posix_fs',
      doc: 'Durable repository: a local or shared directory, or S3-compatible object storage.',
    }),
    record_signing_secret: str({
      env: 'AENV_SNAPSHOT_RECORD_SIGNING_SECRET',
      envBlankIsValue: true,
      commented: true,
      aenv: true,
      secret: true,
      example: 'replace-with-the-same-long-random-secret-on-every-node',
      doc: 'HMAC key that signs every repository record; nodes sharing a repository need the same value. Unset = a managed key under $AENV_HOME/secrets (one node only).',
    }),
    unsigned_records: oneOf(['auto', 'refuse', 'sign_at_startup', 'accept'], {
      default: 'auto',
      aenv: true,
      doc: "Records without a signature (written before signing existed): auto = sign those of a posix_fs repository at this node's first start with signing, refuse later ones and all of oss; refuse; sign_at_startup = sign every unsigned record at each start (trusting the store then); accept = use them unverified (insecure).",
    }),
    p2p_enabled: bool({
      default: true,
      container: false,
      doc: 'Publish and fetch snapshot artifacts over P2P (only with [p2p].enabled).',
    }),
    publish_compression: section(
      'Compression of blobs uploaded to the oss backend (the node-local cache keeps raw files).',
      {
        enabled: bool({
          default: true,
          aenv: true,
          doc: 'Compress layers and artifacts with zstd on upload to oss.',
        }),
        level: int({
          default: 3,
          min: 1,
          max: 19,
          aenv: true,
          doc: 'zstd level (1 = fastest, 19 = smallest).',
        }),
      },
      { aenv: true },
    ),
    image_publish: section('Registry publication of snapshot root filesystems (oss only).', {
      enabled: bool({
        default: false,
        commented: true,
        container: false,
        doc: 'Push rootfs as tag agentenv-snapshot-<id> to the source registry.',
      }),
    }),
  }),

  backend: section('Snapshot repository backends.', {
    posix_fs: section('Directory repository.', {
      snapshot_store: path({
        default: '$AENV_HOME/snapshot-store',
        env: 'AENV_SNAPSHOT_STORE',
        commented: true,
        doc: 'Repository directory (the repository lives in its "repository" subdirectory).',
      }),
    }),
    oss: section('S3-compatible repository.', {
      endpoint: str({
        commented: true,
        trim: true,
        check: httpUrl,
        example: 'https://s3.example.com',
        doc: 'Endpoint URL (required for oss).',
      }),
      bucket: str({
        commented: true,
        trim: true,
        example: 'aenv-snapshots',
        doc: 'Bucket name (required for oss).',
      }),
      region: str({ commented: true, trim: true, example: 'us-east-1', doc: 'Region (required for oss).' }),
      addressing_style: oneOf(['virtual', 'path'], {
        commented: true,
        aliases: ['addressingStyle', 'addressing-style'],
        example: 'path',
        doc: 'Bucket addressing; unset = detected from the endpoint.',
      }),
      prefix: str({ default: '', commented: true, doc: 'Prefix for every object key (e.g. "snapshots/").' }),
      credential_process: str({
        commented: true,
        trim: true,
        aliases: ['credentialProcess', 'credential-process'],
        example: '/usr/local/bin/print-s3-credentials',
        doc: 'Command printing credentials; takes precedence over static keys.',
      }),
      access_key_id: str({
        commented: true,
        trim: true,
        secret: true,
        example: '...',
        doc: 'Static access key id.',
      }),
      access_key_secret: str({
        commented: true,
        trim: true,
        secret: true,
        example: '...',
        doc: 'Static access key secret.',
      }),
      security_token: str({
        commented: true,
        trim: true,
        secret: true,
        example: '...',
        doc: 'Static session token.',
      }),
      cache_max_size_gb: int({
        default: 10,
        min: 1,
        commented: true,
        doc: 'Node-local artifact cache size in GiB.',
      }),
    }),
  }),

  ublk: section(
    'ublk block-device daemon.',
    {
      daemon_binary_path: path({
        default: '$AENV_HOME/ublk/uvm-ublk-daemon',
        env: 'AENV_UBLK_DAEMON_BINARY_PATH',
        commented: true,
        doc: 'Daemon executable.',
      }),
      daemon_socket_path: path({
        default: '$AENV_RUNTIME/ublk-daemon.sock',
        commented: true,
        doc: 'Daemon control socket.',
      }),
      daemon_log_path: path({
        default: '$AENV_HOME/logs/ublk-daemon.log',
        commented: true,
        doc: 'Daemon log file.',
      }),
      daemon_metrics_listen_addr: str({
        default: '0.0.0.0:9103',
        env: 'AENV_UBLK_DAEMON_METRICS_LISTEN_ADDR',
        envBlankIsValue: true,
        trim: true,
        check: listenAddrOrEmpty,
        doc: 'Daemon Prometheus listen address; "" disables it.',
      }),
      overlaybd: section('overlaybd devices.', {
        global_config_path: path({
          default: '$AENV_HOME/overlaybd/overlaybd-global.json',
          commented: true,
          doc: 'Generated overlaybd runtime config (rewritten at every start).',
        }),
        read_only: bool({ default: false, doc: 'Mount root filesystems without a writable upper layer.' }),
        runtime_upper_mode: oneOf(['logStructured', 'hybridLogStructured', 'sparse'], {
          default: 'hybridLogStructured',
          doc: 'Writable upper format for new images.',
        }),
        allow_shrink: bool({ default: false, doc: 'Allow cold starts to shrink a root filesystem.' }),
        resize_timeout_secs: int({
          default: 120,
          doc: 'Cold-start resize timeout in seconds (must be > 0).',
        }),
        download_enable: bool({ default: false, doc: 'Download remote layers in the background.' }),
        p2p_lookup_timeout_ms: int({ default: 300, min: 1, doc: 'P2P lookup timeout in milliseconds.' }),
        p2p_fetch_range_timeout_ms: int({
          default: 2000,
          min: 1,
          doc: 'P2P range fetch timeout in milliseconds.',
        }),
      }),
    },
    { microvmOnly: true },
  ),

  overlaybd: section(
    'overlaybd tools download override.',
    {
      version: str({
        commented: true,
        trim: true,
        example: 'v1.0.18-aenv.1',
        doc: 'overlaybd tools version (required with url or package_url).',
      }),
      url: str({
        commented: true,
        trim: true,
        example: 'https://downloads.example.com/overlaybd-{version}.tgz',
        doc: 'Download URL of the tools.',
      }),
      package_url: str({
        commented: true,
        trim: true,
        example: 'https://downloads.example.com/overlaybd-{version}.deb',
        doc: 'Download URL of the tools package.',
      }),
    },
    { microvmOnly: true },
  ),

  pool: section('Warm pools.', {
    low_watermark: int({ default: 2, min: 0, doc: 'Pools are prewarmed to this many idle items.' }),
    high_watermark: int({
      default: 64,
      min: 0,
      doc: 'Refill targets grow toward this many idle items (the warm sandbox pool: per template).',
    }),
    warm_sandboxes: int({
      default: 2,
      min: 0,
      max: 64,
      aenv: true,
      doc: "Warm sandbox pool's low watermark: pre-started sandboxes (envd running, not yet handed out) kept per image-based template in use, so a create only renames and /inits one; creates that drain it double the template's target up to high_watermark (must be <= it); 0 disables the pool.",
    }),
    sandbox_fill_concurrency: int({
      default: 2,
      min: 1,
      max: 16,
      aenv: true,
      doc: 'Pre-started sandboxes booted at once while the warm sandbox pool refills (all templates together).',
    }),
    sandbox_idle_secs: int({
      default: 300,
      min: 1,
      max: 86400,
      aenv: true,
      doc: "A template's warm sandbox target above warm_sandboxes halves after this many seconds without a create of it; the sandboxes beyond it are removed.",
    }),
    start_captures: bool({
      default: true,
      aenv: true,
      doc: "A create of an image-based template that no warm sandbox serves restores this node's start capture of the template (a checkpoint of a sandbox of it booted and warmed up, made in the background after the template's first such create, the base template's at startup; at most 4 templates) instead of booting; needs CRIU. false: such creates boot.",
    }),
    sandbox_min_available_memory_ratio: num({
      default: 0.2,
      aenv: true,
      doc: 'The warm sandbox pool boots no sandbox while MemAvailable / MemTotal of the host is below this (0 <= ratio < 1).',
    }),
    network: poolComponent('Pre-created network namespace slots.', false),
    block: poolComponent('Warm ublk devices.', true),
    firecracker: section(
      'Pre-spawned Firecracker processes for resume.',
      {
        enabled: bool({ default: true, doc: 'Use this pool at all.' }),
        maintenance_enabled: bool({
          default: true,
          commented: true,
          doc: 'Refill the pool in the background.',
        }),
        startup_prewarm: bool({ default: true, doc: 'Fill the pool during startup.' }),
        fill_concurrency: int({
          default: 4,
          doc: 'Processes spawned at once while refilling (must be > 0).',
        }),
      },
      { microvmOnly: true },
    ),
  }),

  memory_snapshot: section(
    'microVM memory snapshots.',
    {
      overlaybd_global_config_path: path({
        default: '$AENV_HOME/overlaybd/mem-overlaybd-global.json',
        commented: true,
        doc: 'Generated overlaybd config for memory devices.',
      }),
      track_dirty_pages: bool({
        default: true,
        env: 'AGENTENV_MEMORY_SNAPSHOT_TRACK_DIRTY_PAGES',
        doc: 'Use KVM dirty-page tracking instead of mincore (forced false with pvm).',
      }),
      compression_enabled: bool({ default: false, doc: 'Compress memory layers.' }),
      compression_algorithm: oneOf(['lz4', 'zstd'], { default: 'lz4', doc: 'Memory layer compression.' }),
      compression_workers: int({ default: 1, min: 1, doc: 'Compression threads.' }),
      background_download: section('Background download of remote memory layers.', {
        enable: bool({ default: true, doc: 'Fetch missing blocks in the background after envd is ready.' }),
        delay: int({ default: 0, doc: 'Seconds to wait after envd is ready (>= 0).' }),
        delay_extra: int({
          default: 1,
          min: 1,
          doc: 'Exclusive upper bound of extra random delay (1 = none).',
        }),
        try_cnt: int({ default: 5, doc: 'Attempts per download task (>= 1).' }),
        block_size: int({ default: 16777216, doc: 'Bytes per request (<= 64 MiB).' }),
        concurrency: int({ default: 4, doc: 'Requests per layer (1..16).' }),
        max_inflight_blocks: int({ default: 16, doc: 'Blocks in flight across layers (1..128).' }),
      }),
    },
    { microvmOnly: true },
  ),

  observability: section('Node APIs and scheduler reporting.', {
    enabled: bool({ default: true, doc: 'Serve /nodes.' }),
    sandbox_metrics: section(
      "Per-sandbox metrics (GET /sandboxes/{id}/metrics): sampled from each running sandbox's cgroup and disk quota.",
      {
        interval_secs: int({
          aenv: true,
          default: 5,
          min: 1,
          max: 3600,
          env: 'AENV_SANDBOX_METRICS_INTERVAL_SECS',
          doc: 'Seconds between two samples of every running sandbox (one pass over all of them).',
        }),
        max_samples: int({
          aenv: true,
          default: 17280,
          min: 1,
          max: 1_000_000,
          doc: 'Samples kept per sandbox, in memory, for its lifetime; the oldest go first (17280 = a day at 5 s, 1.1 MB).',
        }),
      },
    ),
    sandbox_logs: section(
      'Per-sandbox logs (GET /sandboxes/{id}/logs): lifecycle events in the state database.',
      {
        retention_hours: int({
          aenv: true,
          default: 24,
          min: 0,
          max: 8760,
          doc: "Hours the logs of a killed sandbox stay readable; a running or paused sandbox's are kept.",
        }),
      },
    ),
    scheduler_report: section('Heartbeats to the scheduler.', {
      enabled: bool({
        default: false,
        env: 'AENV_OBSERVABILITY_SCHEDULER_REPORT_ENABLED',
        doc: 'Register with the scheduler and send heartbeats and sandbox lifecycle events (docs/cluster.md#node-heartbeats); on without cluster.scheduler_endpoint the node refuses to start.',
      }),
      interval_secs: int({
        default: 5,
        min: 1,
        env: 'AENV_OBSERVABILITY_REPORT_INTERVAL_SECS',
        doc: 'Seconds between heartbeats; while the scheduler is unreachable, retries back off from this, doubling, up to 15 s (or this, if longer). Three of these are also how often a node of a cluster checks whether paused sandboxes no node holds are past their retention (docs/cluster.md#sandboxes-held-by-no-node).',
      }),
    }),
  }),

  node_identity: section('Identity of this node.', {
    node_id: str({
      env: 'AENV_NODE_ID',
      trim: true,
      commented: true,
      example: 'node-a',
      doc: 'Stable node id; unset = the host name (the reference default.toml ships "node-a").',
    }),
    cluster_id: str({
      default: '00000000-0000-0000-0000-000000000000',
      env: 'AENV_CLUSTER_ID',
      trim: true,
      doc: 'Cluster UUID; an invalid value becomes the nil UUID with a warning.',
    }),
    service_instance_id: str({
      env: 'AENV_SERVICE_INSTANCE_ID',
      trim: true,
      commented: true,
      example: 'service-instance-a',
      doc: 'Id of this server process; unset = a new UUIDv7 at every start.',
    }),
  }),
});

export type ConfigSchema = typeof CONFIG_SCHEMA;
