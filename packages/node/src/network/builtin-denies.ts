// Destinations no sandbox ever reaches, whatever the operator configures: `[network.egress].always_denied_cidrs`
// adds to this list and cannot remove from it, and allowOut never overrides it (docs/security.md, "Network").

import { parseCidr, type Cidr } from '@aenv/config';

interface BuiltinDeny {
  cidr: string;
  why: string;
}

export const BUILTIN_DENIES: readonly BuiltinDeny[] = [
  { cidr: '0.0.0.0/8', why: '"this host": 0.0.0.0 reaches local services on some stacks' },
  { cidr: '127.0.0.0/8', why: 'loopback' },
  {
    cidr: '169.254.0.0/16',
    why: 'link-local: cloud metadata (169.254.169.254 on AWS, GCP, Azure, OCI, OpenStack), AWS time/DNS, ECS and EKS credential endpoints',
  },
  { cidr: '100.100.100.200/32', why: 'Alibaba Cloud metadata' },
  { cidr: '168.63.129.16/32', why: 'Azure WireServer (platform configuration, certificates)' },
  { cidr: '192.0.0.192/32', why: 'Oracle Cloud older metadata address' },
];

export const BUILTIN_DENIED_CIDRS: readonly Cidr[] = BUILTIN_DENIES.map((d) => parseCidr(d.cidr) as Cidr);
