// A `/secrets` secret kept in the snapshot repository, so every node that shares the repository serves it and fills
// it in at egress (docs/networking.md#secrets-in-a-cluster). One signed document per secret, `secrets/<id>`. The
// value is in it only sealed (AES-256-GCM under the cluster's secrets key, bound to the id and version): whoever
// reads the repository without that key learns names and metadata, never a value.
import { z } from 'zod';

export const SECRET_ID = /^sec_[0-9a-f]{24}$/;

export const sharedSecretSchema = z
  .object({
    id: z.string().regex(SECRET_ID),
    name: z.string().regex(/^[a-z0-9][a-z0-9_-]{0,127}$/),
    version: z.number().int().min(1),
    /** iv.tag.ciphertext, base64url each (secrets/secret-store.ts). */
    sealed: z
      .string()
      .regex(/^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/)
      .max(16_384),
    metadata: z.record(z.string(), z.string()),
    createdAt: z.string().min(1).max(64),
    updatedAt: z.string().min(1).max(64),
  })
  .strict();

export type SharedSecret = z.infer<typeof sharedSecretSchema>;

export interface SharedSecrets {
  /** Every readable secret, and the names of documents that did not verify or parse. */
  secrets: SharedSecret[];
  unreadable: string[];
}

/** Why a create wrote nothing. */
export type SharedSecretCreate = 'created' | 'name-taken' | 'full';
