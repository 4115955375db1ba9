import { describe, expect, it } from 'vitest';
import { ArtifactIndex } from './artifact-index.js';

describe('ArtifactIndex', () => {
  it('records holders per (cluster, backend, key) and forgets them', () => {
    const index = new ArtifactIndex(100);
    index.record('c1', 'tcp', 'layer-1', 'a');
    index.record('c1', 'tcp', 'layer-1', 'b');
    index.record('c1', 'rdma', 'layer-1', 'c');
    index.record('c2', 'tcp', 'layer-1', 'd');
    expect(index.lookup('c1', 'tcp', 'layer-1')).toEqual(['a', 'b']);
    expect(index.lookup('c1', 'rdma', 'layer-1')).toEqual(['c']);
    index.forget('c1', 'tcp', 'layer-1', 'a');
    expect(index.lookup('c1', 'tcp', 'layer-1')).toEqual(['b']);
    index.forget('c1', 'tcp', 'layer-1', 'b');
    expect(index.lookup('c1', 'tcp', 'layer-1')).toEqual([]);
    expect(index.size).toBe(2);
  });

  it('ignores blank parts and keeps parts with separators apart', () => {
    const index = new ArtifactIndex(100);
    index.record(' ', 'tcp', 'k', 'a');
    index.record('c', 'tcp', 'k', ' ');
    expect(index.size).toBe(0);
    index.record('a:b', 'c', 'd', 'n1');
    index.record('a', 'b:c', 'd', 'n2');
    expect(index.lookup('a:b', 'c', 'd')).toEqual(['n1']);
    expect(index.lookup('a', 'b:c', 'd')).toEqual(['n2']);
  });

  it('evicts the least recently used key beyond its capacity', () => {
    const index = new ArtifactIndex(2);
    index.record('c', 'tcp', 'k1', 'a');
    index.record('c', 'tcp', 'k2', 'a');
    index.lookup('c', 'tcp', 'k1');
    index.record('c', 'tcp', 'k3', 'b');
    expect(index.size).toBe(2);
    expect(index.lookup('c', 'tcp', 'k2')).toEqual([]);
    expect(index.lookup('c', 'tcp', 'k1')).toEqual(['a']);
    expect(index.lookup('c', 'tcp', 'k3')).toEqual(['b']);
  });

  it('forgets everything a node held', () => {
    const index = new ArtifactIndex(100);
    for (const k of ['k1', 'k2', 'k3']) index.record('c', 'tcp', k, 'gone');
    index.record('c', 'tcp', 'k1', 'stays');
    index.forgetNode('gone');
    expect(index.lookup('c', 'tcp', 'k1')).toEqual(['stays']);
    expect(index.size).toBe(1);
  });
});
