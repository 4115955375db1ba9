import { describe, expect, it } from 'vitest';
import { SlotNames } from './names.js';

describe('SlotNames', () => {
  it('names host objects and parses them back', () => {
    const n = new SlotNames('aenv');
    expect(n.veth(32767)).toBe('aenv-v32767');
    expect(n.netnsFile(5)).toBe('aenv-ns-5');
    expect(n.chain(5)).toBe('slot5');
    expect(n.indexOfVeth('aenv-v12')).toBe(12);
    expect(n.indexOfNetnsFile('aenv-ns-12')).toBe(12);
    expect(n.indexOfChain('slot12')).toBe(12);
  });

  it('ignores names that are not exactly its own', () => {
    const n = new SlotNames('aenv');
    for (const other of [
      'aenv-v0',
      'aenv-v012',
      'aenv-v32768',
      'aenv-v1x',
      'aenvx-v1',
      'eth0',
      'aenv-v',
      'aenv-ns-1.tmp',
    ]) {
      expect(n.indexOfVeth(other)).toBeNull();
      expect(n.indexOfNetnsFile(other)).toBeNull();
    }
    expect(n.indexOfChain('sandbox_egress')).toBeNull();
  });

  it('keeps interface names within 15 characters', () => {
    const n = new SlotNames('abcdefgh');
    expect(n.veth(32767).length).toBeLessThanOrEqual(15);
    for (const bad of ['', 'abcdefghi', '1aenv', 'ae-nv', 'AENV'])
      expect(() => new SlotNames(bad)).toThrow(/prefix/);
  });
});

describe('SlotNames nat chains', () => {
  it('names the nat chain of a slot and finds its index back, so reconcile keeps it', () => {
    const n = new SlotNames('aenv');
    expect(n.redirectChain(12)).toBe('redir12');
    expect(n.indexOfChain('redir12')).toBe(12);
    expect(n.indexOfChain('slot12')).toBe(12);
    expect(n.indexOfChain('redirx')).toBeNull();
  });
});
