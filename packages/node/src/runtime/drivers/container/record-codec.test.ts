import { describe, expect, it } from 'vitest';
import { RuntimeError } from '../../driver.js';
import { containerRecordCodec } from './record-codec.js';

describe('the container driver record codec', () => {
  it('keeps the rootfs as lowerDirs, the key records and captures have always held', () => {
    const layers = ['/var/cache/aenv/images/layers/1', '/var/cache/aenv/images/layers/2'];
    expect(containerRecordCodec.encode({ layers })).toEqual({ lowerDirs: layers });
    // A record of an older node: other keys are the backend's, not the driver's.
    expect(containerRecordCodec.decode({ imageRef: 'x', lowerDirs: layers })).toEqual({ layers });
  });

  it('refuses a record without a usable rootfs, saying what is wrong', () => {
    for (const [stored, re] of [
      [{}, /lowerDirs/],
      [{ lowerDirs: [] }, /lowerDirs/],
      [{ lowerDirs: ['relative'] }, /lowerDirs\.0/],
      [{ lowerDirs: '/l' }, /lowerDirs/],
    ] as const) {
      let err: unknown;
      try {
        containerRecordCodec.decode(stored);
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(RuntimeError);
      expect((err as RuntimeError).reason).toBe('InvalidState');
      expect((err as Error).message).toMatch(re);
    }
  });
});
