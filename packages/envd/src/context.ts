import { statSync } from 'node:fs';
import { Code, ConnectError } from '@connectrpc/connect';
import type { Logger } from './logger.js';
import type { NativeApi } from './native.js';
import type { EnvdState } from './state/envd-state.js';
import type { AsUser } from './users/credentials.js';
import type { SandboxUser, UserDb } from './users/user-db.js';
import { usernameFromBasicAuth } from './auth/access.js';

/** Everything the RPC services and REST handlers share. */
export interface EnvdContext {
  state: EnvdState;
  users: UserDb;
  asUser: AsUser;
  native: NativeApi | undefined;
  logger: Logger;
  /** PATH given to processes before /init envVars (envd's own PATH). */
  basePath: string;
}

export class UnknownUserError extends Error {
  constructor(readonly username: string) {
    super(`invalid username: '${username}'`);
  }
}

/** The sandbox user a request acts as: the named one, or /init's defaultUser (else root). */
export function resolveUser(ctx: EnvdContext, name: string | undefined): SandboxUser {
  const username = name || ctx.state.defaultUser;
  const user = ctx.users.lookup(username);
  if (!user) throw new UnknownUserError(username);
  return user;
}

/** resolveUser for Connect calls: `Authorization: Basic base64("<user>:")`. */
export function rpcUser(ctx: EnvdContext, headers: Headers): SandboxUser {
  try {
    return resolveUser(ctx, usernameFromBasicAuth(headers.get('authorization')));
  } catch (err) {
    if (err instanceof UnknownUserError) throw new ConnectError(err.message, Code.Unauthenticated);
    throw err;
  }
}

/** The environment a process starts with; later layers win: PATH, identity, /init globals, per-call envs. */
export function processEnv(
  ctx: EnvdContext,
  user: SandboxUser,
  envs: Record<string, string>,
): Record<string, string> {
  return {
    PATH: ctx.basePath,
    HOME: user.home,
    USER: user.name,
    LOGNAME: user.name,
    ...ctx.state.globalEnv(),
    ...envs,
  };
}

/** True when dir exists and is a directory as seen by user. */
export function isDirectoryAs(ctx: EnvdContext, user: SandboxUser, dir: string): boolean {
  try {
    return ctx.asUser(user, () => statSync(dir).isDirectory());
  } catch {
    return false;
  }
}
