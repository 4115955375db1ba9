import { describe, expect, it } from 'vitest';
import { decodePageToken } from '@aenv/protocol';
import { mergePages, parseListQuery, type ListedSandbox } from './cluster-list.js';

const t = (s: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, s)).toISOString();
const entry = (sandboxID: string, s: number, from: string): ListedSandbox => ({
  sandboxID,
  startedAt: t(s),
  from,
});

describe('merging the nodes’ pages with the sandboxes held by no node', () => {
  // node-1 took `moving` over while the repository still named it (its claim swapped, the copy not deleted yet).
  const node1 = [entry('a', 5, 'node-1'), entry('moving', 3, 'node-1')];
  const node2 = [entry('b', 4, 'node-2')];
  const shared = [
    entry('moving', 3, 'repository'),
    entry('orphan', 1, 'repository'),
    entry('late', 6, 'repository'),
  ];

  it('lists each sandbox once, the node’s entry over the repository’s (the nodes’ pages come first)', () => {
    const page = mergePages([node1, node2, shared], parseListQuery(''));
    expect(page.items.map((s) => [s.sandboxID, s.from])).toEqual([
      ['late', 'repository'],
      ['a', 'node-1'],
      ['b', 'node-2'],
      ['moving', 'node-1'],
      ['orphan', 'repository'],
    ]);
  });

  it('pages the merge with the nodes’ token: every sandbox once, in order, in both orders', () => {
    for (const order of ['desc', 'asc']) {
      const ids: string[] = [];
      let token = '';
      for (let i = 0; i < 10; i++) {
        const q = parseListQuery(`limit=2&order=${order}${token ? `&nextToken=${token}` : ''}`);
        const page = mergePages([node1, node2, shared], q);
        ids.push(...page.items.map((s) => s.sandboxID));
        if (page.nextToken) expect(decodePageToken(page.nextToken).id).toBe(page.items.at(-1)!.sandboxID);
        token = page.nextToken ?? '';
        if (!token) break;
      }
      const desc = ['late', 'a', 'b', 'moving', 'orphan'];
      expect(ids, order).toEqual(order === 'desc' ? desc : [...desc].reverse());
    }
  });
});
