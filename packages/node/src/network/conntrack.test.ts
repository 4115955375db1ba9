import { describe, expect, it } from 'vitest';
import { deleteLines, flowOf, isRedirected, parseConntrackList } from './conntrack.js';

// `conntrack -L` output of conntrack-tools 1.4.7.
const LISTING = `tcp      6 431999 ESTABLISHED src=10.12.0.3 dst=198.51.100.10 sport=41234 dport=8080 src=198.51.100.10 dst=198.51.100.1 sport=8080 dport=41234 [ASSURED] mark=0 use=1
udp      17 29 src=10.12.0.3 dst=10.255.255.53 sport=5353 dport=53 [UNREPLIED] src=10.255.255.53 dst=198.51.100.1 sport=53 dport=5353 mark=0 use=1
icmp     1 29 src=10.12.0.3 dst=198.51.100.20 type=8 code=0 id=7 src=198.51.100.20 dst=198.51.100.1 type=0 code=0 id=7 mark=0 use=1
gre      47 179 src=10.12.0.3 dst=198.51.100.30 srckey=0x0 dstkey=0x0 src=198.51.100.30 dst=198.51.100.1 srckey=0x0 dstkey=0x0 mark=0 use=1
conntrack v1.4.7 (conntrack-tools): 4 flow entries have been shown.
`;

describe('parseConntrackList', () => {
  it('reads the original direction of every entry and skips the summary', () => {
    const flows = parseConntrackList(LISTING);
    expect(flows).toEqual([
      {
        protocolName: 'tcp',
        protocol: 6,
        src: '10.12.0.3',
        dst: '198.51.100.10',
        sport: 41234,
        dport: 8080,
        replySrc: '198.51.100.10',
      },
      {
        protocolName: 'udp',
        protocol: 17,
        src: '10.12.0.3',
        dst: '10.255.255.53',
        sport: 5353,
        dport: 53,
        replySrc: '10.255.255.53',
      },
      {
        protocolName: 'icmp',
        protocol: 1,
        src: '10.12.0.3',
        dst: '198.51.100.20',
        replySrc: '198.51.100.20',
      },
      {
        protocolName: 'gre',
        protocol: 47,
        src: '10.12.0.3',
        dst: '198.51.100.30',
        replySrc: '198.51.100.30',
      },
    ]);
    expect(flows.some(isRedirected)).toBe(false);
    expect(flowOf(flows[0]!)).toEqual({ daddr: 0xc633640an, protocol: 6, dport: 8080 });
    expect(flowOf(flows[2]!).dport).toBeNull();
  });

  it('tells flows redirected to the egress proxy by their reply source', () => {
    const [flow] = parseConntrackList(
      'tcp      6 431999 ESTABLISHED src=10.12.0.3 dst=198.51.100.10 sport=41234 dport=443 src=10.12.0.2 dst=10.12.0.3 sport=15081 dport=41234 [ASSURED] mark=0 use=1\n',
    );
    expect(flow?.replySrc).toBe('10.12.0.2');
    expect(isRedirected(flow!)).toBe(true);
  });

  it('ignores lines that are not entries, or whose addresses are not IPv4', () => {
    expect(parseConntrackList('garbage\n\ntcp 6 1 src=a dst=b\n')).toEqual([]);
  });
});

describe('deleteLines', () => {
  it('deletes TCP/UDP by their tuple and other protocols by address pair, once each', () => {
    const flows = parseConntrackList(LISTING);
    expect(deleteLines([...flows, flows[3]!])).toBe(
      [
        '-D -s 10.12.0.3 -d 198.51.100.10 -p tcp --sport 41234 --dport 8080',
        '-D -s 10.12.0.3 -d 10.255.255.53 -p udp --sport 5353 --dport 53',
        '-D -s 10.12.0.3 -d 198.51.100.20 -p 1',
        '-D -s 10.12.0.3 -d 198.51.100.30 -p 47',
        '',
      ].join('\n'),
    );
  });
});
