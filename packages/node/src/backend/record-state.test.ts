import { describe, expect, it } from 'vitest';
import { RuntimeError, type DriverRecordCodec } from '../runtime/driver.js';
import { BackendRecordCodec, RecordStateError } from './record-state.js';

/** A driver keeping its rootfs under a key of its own (the container driver's is tested beside it). */
const driverCodec: DriverRecordCodec = {
  encode: (rootfs) => ({ layerDirs: rootfs.layers }),
  decode: (s) => {
    if (!Array.isArray(s.layerDirs) || s.layerDirs.length === 0)
      throw new RuntimeError('InvalidState', 'layerDirs: no layers');
    return { layers: s.layerDirs as string[] };
  },
};
const codec = new BackendRecordCodec(driverCodec);

/** `SandboxRecord.backend` as the container backend stores it. */
const stored = {
  imageRef: 'aenv/base:latest',
  manifestDigest: 'sha256:abc',
  layerDirs: ['/var/cache/aenv/images/layers/1', '/var/cache/aenv/images/layers/2'],
  toolsVersion: '0.1.0',
  envdEnv: { PATH: '/usr/bin', ENVD_PORT: '49983' },
  resident: true,
  residentSlot: 3,
  thawable: true,
};

describe('the container backend record codec', () => {
  it('reads a stored state and writes it back key for key', () => {
    const state = codec.decodeState('sb1', stored);
    expect(state.rootfs).toEqual({ layers: stored.layerDirs });
    expect(state.residentSlot).toBe(3);
    expect(codec.encodeState(state)).toEqual(stored);
  });

  it('drops what was cleared, as a JSON round trip would', () => {
    const state = codec.decodeState('sb1', stored);
    const cleared = codec.encodeState({
      ...state,
      resident: false,
      residentSlot: undefined,
      thawable: undefined,
    });
    expect(cleared).toEqual({ ...stored, resident: false, residentSlot: undefined, thawable: undefined });
    expect(Object.keys(cleared)).not.toContain('residentSlot');
  });

  it('refuses a state that is not what it wrote, naming the sandbox and the field', () => {
    const bad = (v: unknown, re: RegExp) => {
      let err: unknown;
      try {
        codec.decodeState('sb-bad', v);
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(RecordStateError);
      expect((err as Error).message).toMatch(/^sandbox sb-bad: its stored backend state /);
      expect((err as Error).message).toMatch(re);
    };
    bad(null, /is not an object/);
    bad([], /is not an object/);
    bad({ ...stored, manifestDigest: 7 }, /manifestDigest/);
    bad({ ...stored, residentSlot: -1 }, /residentSlot/);
    bad({ ...stored, envdEnv: { A: 1 } }, /envdEnv\.A/);
    bad({ ...stored, layerDirs: undefined }, /is invalid \(layerDirs: no layers\)/);
  });

  it('writes captures in the format launches and older nodes read', () => {
    const extra = {
      sourceSandboxId: 'sb1',
      sourceSecure: true,
      toolsVersion: '0.1.0',
      envdEnv: { PATH: '/bin' },
      rootfs: { layers: ['/l/1'] },
    };
    const written = codec.encodeCapture(extra);
    expect(written).toEqual({
      sourceSandboxId: 'sb1',
      sourceSecure: true,
      toolsVersion: '0.1.0',
      envdEnv: { PATH: '/bin' },
      layerDirs: ['/l/1'],
    });
    expect(codec.decodeCapture('snap1', written)).toEqual({
      sourceSandboxId: 'sb1',
      sourceSecure: true,
      toolsVersion: '0.1.0',
      envdEnv: { PATH: '/bin' },
    });
    expect(() => codec.decodeCapture('snap1', { ...written, sourceSecure: 'yes' })).toThrow(
      /^snapshot snap1: its capture record \(committed\.extra\) is invalid \(sourceSecure: /,
    );
    expect(() => codec.decodeCapture('snap1', undefined)).toThrow(/sourceSandboxId/);
  });
});
