import { z } from 'zod';

/** The body of every error answer of the control plane and the data plane: `{"code": N, "message": "..."}`. */
export interface ErrorBody {
  /** Normally the HTTP status; a few 500 answers carry another code (docs/differences.md). */
  code: number;
  message: string;
}

export const errorBodySchema = z.object({ code: z.number().int(), message: z.string() });

/** The error body in `json`, or undefined when it is not one. */
export function asErrorBody(json: unknown): ErrorBody | undefined {
  const r = errorBodySchema.safeParse(json);
  return r.success ? { code: r.data.code, message: r.data.message } : undefined;
}
