// What the container driver keeps on a sandbox record and in captures about a sandbox's rootfs: its image
// layer dirs as `lowerDirs`, the key records and snapshot repositories have always held, and its attached
// drives as `drives` (absent: none).
import { z } from 'zod';
import { RuntimeError, type DriverRecordCodec, type RootfsSpec } from '../../driver.js';

const StoredDrive = z.object({
  id: z.string().min(1),
  image: z.object({ reference: z.string().min(1), manifestDigest: z.string().min(1) }),
  layers: z.array(z.string().startsWith('/')).min(1),
  mountPath: z.string().startsWith('/'),
  subPath: z.string().min(1).optional(),
  readOnly: z.boolean(),
  sizeMB: z.number().int().positive().optional(),
});

const Stored = z.object({
  lowerDirs: z.array(z.string().startsWith('/')).min(1),
  drives: z.array(StoredDrive).optional(),
});

export const containerRecordCodec: DriverRecordCodec = {
  encode(rootfs: RootfsSpec): Record<string, unknown> {
    return {
      lowerDirs: [...rootfs.layers],
      ...(rootfs.drives?.length
        ? { drives: rootfs.drives.map((d) => ({ ...d, layers: [...d.layers] })) }
        : {}),
    };
  },
  decode(stored: Record<string, unknown>): RootfsSpec {
    const parsed = Stored.safeParse(stored);
    if (!parsed.success) {
      const why = parsed.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ');
      throw new RuntimeError('InvalidState', `no rootfs the container driver can run on (${why})`);
    }
    const { lowerDirs, drives } = parsed.data;
    return {
      layers: lowerDirs,
      ...(drives?.length
        ? {
            drives: drives.map(({ subPath, sizeMB, ...d }) => ({
              ...d,
              ...(subPath === undefined ? {} : { subPath }),
              ...(sizeMB === undefined ? {} : { sizeMB }),
            })),
          }
        : {}),
    };
  },
};
