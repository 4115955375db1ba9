import type { FieldSpec } from './field.js';
import { NAMED_FLAGS } from './layers.js';
import { CONFIG_FIELDS } from './load.js';
import { MICROVM_ONLY_SECTIONS } from './mode.js';
import { CONFIG_SCHEMA } from './schema.js';
import { listSections } from './walk.js';

/** The text of docs/configuration.md, generated from the schema. */
export function renderConfigurationDoc(): string {
  return [intro(), keysReference(), envReference(), differences()].join('\n');
}

function intro(): string {
  const flags = Object.values(NAMED_FLAGS)
    .map(([key, flag]) => `\`${flag}\` (\`${key}\`)`)
    .join(', ');
  return `# Configuration

<!-- Generated from packages/config/src/schema.ts by \`npm run -w @aenv/config gen:docs\`. Do not edit. -->

An aenv node (\`aenv server\`) reads one TOML file plus environment variables and command-line flags.
[\`config/default.toml\`](../config/default.toml) lists every key with its default; keys marked
**aenv** are additions to the AgentENV reference configuration, every other key keeps the
reference's name, type and meaning.

## Loading

- **File**: \`--config <path>\`, else \`AENV_CONFIG_PATH\` (trimmed; blank = not set), else
  \`<repo>/config/default.toml\`. A missing or unreadable file, or invalid TOML, stops the server.
- **Precedence**: CLI flag > environment variable > file > built-in default, key by key.
- **Flags**: ${flags}, and \`--set <key>=<value>\` (repeatable) for any key, e.g.
  \`--set image.cache.gc.enabled=false\`. Flag and environment values are text: integers, numbers,
  booleans (\`true/false/1/0/yes/no/on/off\`) and comma-separated lists are converted to the key's type
  (a \`--set\` list may also be a TOML array such as \`["a","b"]\`).
- **Blank environment variables** count as not set (so \`X=\` in an env file keeps the file's value),
  except \`AENV_SANDBOX_ACCESS_TOKEN_HASH_SEED\`, where a blank value is an error.
- **Unknown keys** in the file are reported as warnings naming the full key path (with a suggestion
  when a known key is close) and ignored; an unknown \`--set\` key is an error.
- **Errors** name the key, the value, the rule and, for environment variables and flags, where the
  value came from, e.g. \`image.cache.gc.low_watermark_ratio = 0.99: must be <= high_watermark_ratio (0.95)\`.
  Every problem is reported at once, one per line. Secret values are never echoed.
- The result is a typed, deeply frozen object whose keys mirror the TOML keys
  (\`config.image.cache.gc.interval_secs\`).

## Paths

- \`home_path\` (\`$AENV_HOME\`) relative → against the directory of the config file. It cannot use placeholders.
- \`runtime_path\` (\`$AENV_RUNTIME\`) may use \`$AENV_HOME\`.
- Every other path key may use \`$AENV_HOME\` and \`$AENV_RUNTIME\` (aenv honours \`$AENV_RUNTIME\` in all
  path keys; the reference only in \`ublk.daemon_socket_path\`). After expansion, relative paths
  resolve against the directory of the config file. Other \`$NAME\` text is kept literally, with a warning.
- \`runtime.criu_path\` empty → \`<deps_path>/criu/current/bin/criu\`; \`runtime.tools_dir\` empty →
  \`<deps_path>/tools\`. \`runtime.runc_path\` without a \`/\` is looked up in \`PATH\`.
- The loaded configuration holds absolute, normalised paths.

## Normalisation

- \`sandbox_proxy.domains\`: trimmed, one trailing \`.\` removed, empty entries dropped, lower-cased,
  validated as DNS names (at most 253 characters; labels of 1-63 \`[a-z0-9-]\` not starting or ending
  with \`-\`), de-duplicated keeping the first (the first is advertised to clients as \`domain\`).
- \`image.resolver.default_image\` trimmed, blank → \`ubuntu:24.04\`; registry lists
  (\`search_registries\`, \`allowed_registries\`, \`insecure_registries\`) trimmed with trailing \`/\`
  removed. \`allowed_registries\` unset allows every registry; \`[]\` allows none.
- \`image.cache.gc.interval_secs = 0\` → 1800.
- \`virtualization_mode = "pvm"\` forces \`memory_snapshot.track_dirty_pages = false\`.
- \`p2p.peer_discovery_refresh_interval_secs\` below 1 → 1 (warning).
- \`cluster.scheduler_endpoint\`, \`custom_extension.url\` and the optional identity keys are trimmed; blank = unset.
- \`node_identity.cluster_id\` that is not a UUID → the nil UUID, with a warning.
- \`sandbox.access_token_hash_seed\` trimmed; blank is an error.
- \`snapshot.record_signing_secret\` trimmed; blank is an error. \`image.resolver.local_image_dirs\` entries trimmed,
  trailing \`/\` removed.

## Validation (startup fails)

- \`pool.low_watermark <= pool.high_watermark\` while any pool is in use (\`pool.network.maintenance_enabled\`,
  \`pool.block.enabled\`, \`pool.firecracker.enabled\`); \`pool.firecracker.fill_concurrency > 0\`.
- \`pool.warm_sandboxes <= pool.high_watermark\` (it is the warm sandbox pool's low watermark; 0 disables the
  pool); \`pool.sandbox_min_available_memory_ratio\` finite with \`0 <= ratio < 1\`.
- \`image.cache.gc\`: both ratios finite with \`0 < ratio <= 1\`, and \`low_watermark_ratio <= high_watermark_ratio\`.
- \`network.egress.always_denied_cidrs\`: every entry an IPv4 CIDR. \`network.internal\`: both IPv4 CIDRs,
  \`host_interaction_cidr\` with at least 32768 addresses, \`veth_cidr\` with at least 65536, pairwise
  non-overlapping with each other and with the fixed VM link \`169.254.0.20/30\`. aenv also rejects CIDRs
  with host bits set (\`10.11.0.5/16\`), naming the intended network.
- \`ublk.overlaybd.resize_timeout_secs > 0\`.
- \`memory_snapshot.track_dirty_pages = true\` with pvm is an error (normalisation forces it false first).
- \`memory_snapshot.background_download\`: \`concurrency\` 1..16, \`block_size\` <= 64 MiB,
  \`block_size × concurrency\` <= 256 MiB, \`max_inflight_blocks\` 1..128,
  \`block_size × max_inflight_blocks\` <= 2 GiB, \`delay >= 0\`, \`try_cnt >= 1\`.
- The overlaybd configs \`ublk.overlaybd.global_config_path\`, \`memory_snapshot.overlaybd_global_config_path\`
  and the convert/resize configs derived from the first (\`convert-<name>\`, \`resize-<name>\` beside it)
  must be four different files, compared as written and after resolving symlinks.
- \`machine.disk_rate_limit\` (when enabled): a burst needs its sustained limit nonzero. Integers above
  2^53 are rejected when the file is read, which also keeps every value <= i64::MAX.
- \`image.resolver.local_image_dirs\`: every entry absolute, without \`..\`, and not \`/\`.
- \`sandbox.access_token_hash_seed\`, when set, is non-empty after trimming. The API key (not a config key,
  see below) must be 32-256 characters of \`[A-Za-z0-9._~-]\`.
- \`[limits]\`: \`machine.vcpu_count <= limits.max_cpu_count\` and \`machine.mem_size_mib <= limits.max_memory_mb\`
  (when those limits are not 0), \`runtime.default_disk_size_mb <= limits.max_disk_size_mb\`,
  \`limits.max_fork_count <= limits.max_concurrent_creates\`.
- Per key: types, ranges and enumerations as listed in the tables below; listen addresses are
  \`host:port\`; URLs are \`http(s)://\`; \`tools.drive_path\`/\`tools.url\` need \`tools.version\` (SemVer
  without build metadata); \`snapshot.repository_backend = "oss"\` needs \`backend.oss.endpoint\`,
  \`bucket\` and \`region\`, and static keys come in pairs.

## Virtualization modes

\`virtualization_mode\` accepts \`container\`, \`kvm\` and \`pvm\` so that reference configuration files
load, but this build only has the container driver: the server refuses to start in \`kvm\`/\`pvm\`
mode, naming the key. These sections only concern the microVM drivers and have no effect in
container mode (the server logs once which of them are set to non-default values):
${MICROVM_ONLY_SECTIONS.map((s) => `\`[${s}]\``).join(', ')}.
`;
}

function keysReference(): string {
  const out: string[] = ['## Keys', ''];
  out.push(
    'Default = built-in default; where `config/default.toml` ships a different value it is given as',
    '"file:". Container = whether the key has an effect with `virtualization_mode = "container"`.',
    '',
  );
  for (const s of listSections(CONFIG_SCHEMA)) {
    const fields = Object.entries(s.section.entries).filter(
      (e): e is [string, FieldSpec] => e[1].kind === 'field',
    );
    if (fields.length === 0) continue;
    const title = s.key === '' ? 'Top level' : `\`[${s.key}]\``;
    const tags = [s.section.aenv ? '**aenv**' : '', s.microvmOnly ? '*microVM only*' : '']
      .filter(Boolean)
      .join(', ');
    out.push(`### ${title}`, '', `${s.section.doc}${tags ? ` (${tags})` : ''}`, '');
    out.push('| Key | Type | Default | Env | Container | Meaning |', '|---|---|---|---|---|---|');
    for (const [name, field] of fields) {
      const container = s.microvmOnly || field.container === false ? 'no' : 'yes';
      const meaning = `${field.aenv ? '**aenv** ' : ''}${field.secret ? '*secret* ' : ''}${field.doc}${
        field.aliases ? ` Also spelled ${field.aliases.map((a) => `\`${a}\``).join(', ')}.` : ''
      }`;
      out.push(
        `| \`${name}\` | ${cell(field.typeLabel)} | ${defaultCell(field)} | ${field.env ? `\`${field.env}\`` : ''} | ${container} | ${cell(meaning)} |`,
      );
    }
    out.push('');
  }
  return out.join('\n');
}

function envReference(): string {
  const out = ['## Environment variables', '', '| Variable | Key | Container |', '|---|---|---|'];
  for (const f of CONFIG_FIELDS) {
    if (!f.field.env) continue;
    out.push(
      `| \`${f.field.env}\` | \`${f.key}\` | ${f.microvmOnly || f.field.container === false ? 'no' : 'yes'} |`,
    );
  }
  out.push(
    '',
    'Read outside the configuration object:',
    '',
    '- `AENV_CONFIG_PATH`: the config file (see Loading).',
    '- `AENV_API_KEY`: the control-plane API key; else `/run/secrets/api-key`, else the managed',
    '  `$AENV_HOME/secrets/api-key`, else a generated `e2b_<64 hex>` stored there (mode 0600 in a 0700',
    '  `secrets` directory).',
    '- The access-token seed, when not configured, is the managed `$AENV_HOME/secrets/sandbox-access-token-hash-seed`',
    '  (64 lowercase hex), created on first start unless token-protected paused sandboxes exist.',
    '',
    'Reference variables aenv does not read: `AENV_LOG_SPAN_EVENTS` and `RUST_LOG` (Rust tracing; use',
    '`AENV_LOG_LEVEL`), `AENV_FORCE_SYSCTL_TUNING` (host setup, not configuration), `SANDBOX_PROXY_DOMAINS`',
    '(deploy helpers pass it on as `AENV_SANDBOX_PROXY_DOMAINS`).',
    '',
  );
  return out.join('\n');
}

function differences(): string {
  return `## Differences from the reference

- \`virtualization_mode\` adds \`container\`, the built-in default and the value in \`config/default.toml\`.
- \`node_identity.node_id\` and \`node_identity.service_instance_id\` are commented out in
  \`config/default.toml\` (the reference ships \`"node-a"\` and \`"service-instance-a"\`), so a node gets its
  host name and a fresh UUIDv7 per start unless configured: two nodes started from the shipped file
  never share an identity.
- \`$AENV_RUNTIME\` works in every path key; CIDRs with host bits set are rejected.
- aenv keys: \`api_addr\`, \`log_format\`, \`log_level\`, \`[api]\`, \`[runtime]\`,
  \`image.resolver.insecure_registries\`, \`orchestrator.resident_pause_grace_secs\`,
  \`orchestrator.max_transition_wait_secs\`, \`[template_build]\`.
`;
}

function defaultCell(field: FieldSpec): string {
  const show = (v: unknown) => `\`${cell(JSON.stringify(v))}\``;
  const base = field.default === undefined ? 'unset' : field.default === '' ? '`""`' : show(field.default);
  return field.shipped !== undefined ? `${base} (file: ${show(field.shipped)})` : base;
}

function cell(text: string): string {
  return text.replace(/\|/g, '\\|').replace(/\n/g, ' ');
}
