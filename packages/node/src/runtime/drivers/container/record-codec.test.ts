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

  it('keeps attached drives next to the layers, and leaves the key out when there are none', () => {
    const drive = {
      id: 'data',
      image: { reference: 'r/busybox:latest', manifestDigest: 'sha256:ab' },
      layers: ['/var/cache/aenv/images/layers/9'],
      mountPath: '/mnt/data',
      subPath: 'bin',
      readOnly: false,
      sizeMB: 2048,
    };
    const layers = ['/l/1'];
    const stored = containerRecordCodec.encode({ layers, drives: [drive] });
    expect(stored).toEqual({ lowerDirs: layers, drives: [drive] });
    expect(
      containerRecordCodec.decode(JSON.parse(JSON.stringify(stored)) as Record<string, unknown>),
    ).toEqual({
      layers,
      drives: [drive],
    });
    expect(containerRecordCodec.encode({ layers, drives: [] })).toEqual({ lowerDirs: layers });
  });

  it('refuses a record without a usable rootfs, saying what is wrong', () => {
    for (const [stored, re] of [
      [{}, /lowerDirs/],
      [{ lowerDirs: [] }, /lowerDirs/],
      [{ lowerDirs: ['relative'] }, /lowerDirs\.0/],
      [{ lowerDirs: '/l' }, /lowerDirs/],
      [{ lowerDirs: ['/l'], drives: [{ id: 'd' }] }, /drives\.0\./],
      [{ lowerDirs: ['/l'], drives: 'x' }, /drives/],
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
