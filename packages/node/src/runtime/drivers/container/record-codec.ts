// What the container driver keeps on a sandbox record and in captures about a sandbox's rootfs: its image
// layer dirs as `lowerDirs`, the key records and snapshot repositories have always held.
import { z } from 'zod';
import { RuntimeError, type DriverRecordCodec, type RootfsSpec } from '../../driver.js';

const Stored = z.object({ lowerDirs: z.array(z.string().startsWith('/')).min(1) });

export const containerRecordCodec: DriverRecordCodec = {
  encode(rootfs: RootfsSpec): Record<string, unknown> {
    return { lowerDirs: [...rootfs.layers] };
  },
  decode(stored: Record<string, unknown>): RootfsSpec {
    const parsed = Stored.safeParse(stored);
    if (!parsed.success) {
      const why = parsed.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ');
      throw new RuntimeError('InvalidState', `no rootfs the container driver can run on (${why})`);
    }
    return { layers: parsed.data.lowerDirs };
  },
};
