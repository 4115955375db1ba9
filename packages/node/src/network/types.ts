// Contract between the network subsystem and the orchestrator / runtime driver.

/** One pre-created network namespace with its addresses. */
export interface NetworkSlot {
  index: number;
  /** Bind-mounted netns file, given to the runtime driver as the sandbox's network namespace. */
  netnsPath: string;
  /** Host side of the veth pair. */
  hostIfName: string;
  /** Address the server uses to reach services in the sandbox (envd on [tools].control_plane_port). */
  hostInteractionIp: string;
  /** Nameserver to write into the sandbox's /etc/resolv.conf (null: none known). */
  dnsServer: string | null;
  /** Host end of the /31 veth link (the sandbox's default gateway). */
  hostLinkIp: string;
  /** Sandbox end of the /31 veth link (`eth0` in the netns); the source address of its egress. */
  sandboxLinkIp: string;
  /** `http://<hostInteractionIp>:<control plane port>`: where envd answers. */
  envdUrl: string;
}

/** Egress policy after validation (see network/policy.ts). CIDRs are normalized IPv4/IPv6 CIDR strings. */
export interface EgressPolicy {
  allowOut: string[];
  denyOut: string[];
  /** true: allow, false: deny everything not in allowOut, null: not set (allow). */
  allowInternetAccess: boolean | null;
  /** `network.rules`: keys lowercased (egress/header-rules.ts); absent or {}: no request is intercepted. */
  rules?: NetworkRules;
  /** The SOCKS5 upstream the sandbox's allowed TCP leaves through (absent: straight out). */
  egressProxy?: EgressProxyConfig;
}

/** `network.egressProxy` after validation (policy.ts `parseEgressProxy`). */
export interface EgressProxyConfig {
  /** `host:port` as given (host: an IPv4 literal or a DNS name, lowercased). */
  address: string;
  host: string;
  port: number;
  /** RFC 1929 credentials, each 1-255 bytes; password only with a username. */
  username?: string;
  password?: string;
}

/** E2B's `SandboxNetworkRule` lists by domain key, validated (header values are credentials: never logged). */
export type NetworkRules = Record<string, { transform?: { headers?: Record<string, string> } }[]>;
