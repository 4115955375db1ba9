import { describe, expect, it } from 'vitest';
import { imageDiskSizeMB } from './cold-image.js';

const MiB = 1024 ** 2;

describe('imageDiskSizeMB', () => {
  it('is the unpacked layers in MiB rounded up to a multiple of 1024, at least 1024', () => {
    expect(imageDiskSizeMB([])).toBe(1024);
    expect(imageDiskSizeMB([{ size: 4 * MiB }])).toBe(1024);
    expect(imageDiskSizeMB([{ size: 1024 * MiB }])).toBe(1024);
    expect(imageDiskSizeMB([{ size: 1024 * MiB }, { size: 1 }])).toBe(2048);
    expect(imageDiskSizeMB([{ size: 700 * MiB }, { size: 900 * MiB }, { size: 1500 * MiB }])).toBe(4096);
  });
});
