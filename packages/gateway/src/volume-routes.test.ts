import { describe, expect, it } from 'vitest';
import { needsApiKey, route } from './routing.js';
import {
  mergeVolumeLists,
  mountedPaths,
  mountedVolumeNames,
  placeMounts,
  recordedMounts,
  volumeItems,
  volumeRoute,
} from './volume-routes.js';

const ID = '0b7c7a52-7d4e-4c1a-9a55-3b1f0f9d2c11';

describe('volume routes through the gateway', () => {
  it('classifies /volumes and /volumecontent, and only content skips the API key', () => {
    expect(volumeRoute('GET', '/volumes')).toEqual({ kind: 'list' });
    expect(volumeRoute('POST', '/volumes')).toEqual({ kind: 'create' });
    expect(volumeRoute('GET', `/volumes/${ID}`)).toEqual({ kind: 'one', volumeId: ID });
    expect(volumeRoute('DELETE', `/volumes/${ID}`)).toEqual({ kind: 'one', volumeId: ID });
    expect(volumeRoute('PUT', `/volumes/${ID}`)).toBeUndefined();
    expect(volumeRoute('PUT', `/volumecontent/${ID}/file`)).toEqual({ kind: 'content', volumeId: ID });
    // Malformed content paths name no volume: the token check refuses them at the gateway.
    for (const p of [`/volumecontent/${ID}/x`, `/volumecontent/${ID}`, `/volumecontent/${ID}/file/extra`])
      expect(volumeRoute('GET', p)).toEqual({ kind: 'content', volumeId: '' });
    const content = route('PUT', `/volumecontent/${ID}/file?path=a`, {}, []);
    expect(content).toEqual({ kind: 'volume', op: { kind: 'content', volumeId: ID } });
    expect(needsApiKey(content)).toBe(false);
    // Routing headers do not turn the content API into sandbox traffic.
    const withHeaders = route(
      'GET',
      `/volumecontent/${ID}/dir`,
      { 'e2b-sandbox-id': 'x', 'e2b-sandbox-port': '49983' },
      [],
    );
    expect(withHeaders.kind).toBe('volume');
    for (const [m, p] of [
      ['GET', '/volumes'],
      ['POST', '/volumes'],
      ['DELETE', `/volumes/${ID}`],
    ] as const)
      expect(needsApiKey(route(m, p, {}, []))).toBe(true);
  });

  it('reads the names a create mounts, leaving malformed bodies to the node', () => {
    const b = (v: unknown) => Buffer.from(JSON.stringify(v));
    expect(
      mountedVolumeNames(
        b({
          volumeMounts: [
            { name: 'a', path: '/x' },
            { name: 'b', path: '/y' },
            { name: 'a', path: '/z' },
          ],
        }),
      ),
    ).toEqual(['a', 'b']);
    for (const body of [
      b({}),
      b({ volumeMounts: [] }),
      b({ volumeMounts: 'a' }),
      b({ volumeMounts: [{ name: 1 }] }),
      b({ volumeMounts: [null] }),
      b([1]),
      Buffer.from('{'),
    ])
      expect(mountedVolumeNames(body)).toBeUndefined();
  });

  it('places mounts on the nodes holding them all, else says why', () => {
    const holders = new Map([
      [
        'n1',
        new Map([
          ['a', 'id-a'],
          ['dup', 'id-dup1'],
          ['shared', 'id-s'],
          ['shared2', 'id-s2'],
        ]),
      ],
      [
        'n2',
        new Map([
          ['b', 'id-b'],
          ['dup', 'id-dup2'],
          ['shared', 'id-s'],
        ]),
      ],
      ['n3', new Map([['shared', 'id-s']])],
    ]);
    expect(placeMounts(['a'], holders, [])).toEqual({ ok: true, nodeIds: ['n1'] });
    expect(placeMounts(['b', 'b'], holders, ['n4'])).toEqual({ ok: true, nodeIds: ['n2'] });
    // One id on several nodes: one volume on a shared directory, any of them will do.
    expect(placeMounts(['shared'], holders, [])).toEqual({ ok: true, nodeIds: ['n1', 'n2', 'n3'] });
    expect(placeMounts(['shared', 'b'], holders, [])).toEqual({ ok: true, nodeIds: ['n2'] });
    expect(placeMounts(['shared2', 'shared'], holders, [])).toEqual({ ok: true, nodeIds: ['n1'] });
    expect(placeMounts(['a', 'b'], holders, [])).toMatchObject({
      ok: false,
      status: 409,
      message: expect.stringMatching(/"a" on n1, "b" on n2.*one node/),
    });
    expect(placeMounts(['shared2', 'b'], holders, [])).toMatchObject({
      ok: false,
      status: 409,
      message: expect.stringMatching(/"shared2" on n1, "b" on n2/),
    });
    // One name, different volumes: the gateway cannot tell which is meant.
    expect(placeMounts(['dup'], holders, [])).toMatchObject({
      ok: false,
      status: 409,
      message: expect.stringMatching(/several nodes \(n1, n2\) as different volumes/),
    });
    expect(placeMounts(['nope'], holders, [])).toEqual({
      ok: false,
      status: 404,
      message: 'volume "nope" not found',
    });
    expect(placeMounts(['nope'], holders, ['n4'])).toMatchObject({
      ok: false,
      status: 502,
      message: expect.stringMatching(/n4 unreachable/),
    });
    // A launched snapshot's recorded volumes, by id: placed with the request's, or alone.
    const rec = (volumeID: string, path = '/r') => ({ volumeID, name: `v-${volumeID}`, path });
    expect(placeMounts([], holders, [], [rec('id-a')])).toEqual({ ok: true, nodeIds: ['n1'] });
    expect(placeMounts([], holders, [], [rec('id-s')])).toEqual({ ok: true, nodeIds: ['n1', 'n2', 'n3'] });
    expect(placeMounts(['b'], holders, [], [rec('id-s')])).toEqual({ ok: true, nodeIds: ['n2'] });
    expect(placeMounts(['b'], holders, [], [rec('id-a', '/data')])).toMatchObject({
      ok: false,
      status: 409,
      message: expect.stringMatching(/"b" on n2, "v-id-a" \(the snapshot's, at \/data\) on n1/),
    });
    // One no node has any more places nothing (the node's 400 names it), unless a node did not answer.
    expect(placeMounts([], holders, [], [rec('id-gone')])).toEqual({ ok: true, nodeIds: undefined });
    expect(placeMounts(['a'], holders, [], [rec('id-gone')])).toEqual({ ok: true, nodeIds: ['n1'] });
    expect(placeMounts([], holders, ['n4'], [rec('id-gone')])).toMatchObject({ ok: false, status: 502 });
  });

  it('reads the paths a create mounts at and the mounts a snapshot recorded', () => {
    const body = (v: unknown) => Buffer.from(JSON.stringify({ volumeMounts: v }));
    expect([
      ...mountedPaths(body([{ name: 'a', path: '/data/' }, { name: 'b', path: '//x//y' }, { path: 3 }])),
    ]).toEqual(['/data', '/x/y']);
    expect([...mountedPaths(body('junk'))]).toEqual([]);
    const m = { volumeID: ID, name: 'a', path: '/data' };
    expect(recordedMounts({ volumeMounts: [m, { volumeID: 1 }, null] })).toEqual([m]);
    for (const doc of [null, {}, { volumeMounts: 'x' }]) expect(recordedMounts(doc)).toEqual([]);
  });

  it('merges node lists: deduplicated, sorted by name, malformed lists refused', () => {
    const v = (volumeID: string, name: string) => ({ volumeID, name });
    expect(
      mergeVolumeLists([
        [v('2', 'b'), v('1', 'a')],
        [v('3', 'a'), v('2', 'b')],
      ]),
    ).toEqual([v('1', 'a'), v('3', 'a'), v('2', 'b')]);
    expect(volumeItems([v('1', 'a')])).toEqual([v('1', 'a')]);
    for (const bad of [{}, [null], [{ volumeID: 1, name: 'a' }], 'x'])
      expect(volumeItems(bad)).toBeUndefined();
  });
});
